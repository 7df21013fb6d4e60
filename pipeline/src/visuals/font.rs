//! Text drawn as paths: glyph outlines from the embedded DejaVu Sans Mono (its licence is
//! `pipeline/assets/DejaVuSansMono-LICENSE.txt`), so no picture depends on the fonts of
//! the machine that renders or displays it.
use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::error::VisualsError;

/// The embedded font's bytes.
pub const FONT: &[u8] = include_bytes!("../../assets/DejaVuSansMono.ttf");
/// How the manifest names the font.
pub const FONT_NAME: &str = "pipeline/assets/DejaVuSansMono.ttf";

/// The parsed font: every outline in font units (y up).
pub struct Font<'a> {
    face: ttf_parser::Face<'a>,
}

impl Font<'static> {
    /// The embedded DejaVu Sans Mono face.
    pub fn embedded() -> Result<Self, VisualsError> {
        let face = ttf_parser::Face::parse(FONT, 0).map_err(VisualsError::Font)?;
        Ok(Font { face })
    }
}

impl Font<'_> {
    /// Font units per em.
    pub fn units_per_em(&self) -> f32 {
        f32::from(self.face.units_per_em())
    }

    /// The advance of every glyph (a monospaced face), in font units.
    pub fn advance(&self) -> f32 {
        self.face
            .glyph_index('0')
            .and_then(|g| self.face.glyph_hor_advance(g))
            .map(f32::from)
            .unwrap_or(1233.0)
    }

    /// The SVG path data of `ch`'s outline in font units; empty for blank glyphs.
    pub fn outline(&self, ch: char) -> Result<String, VisualsError> {
        let glyph = self
            .face
            .glyph_index(ch)
            .ok_or(VisualsError::MissingGlyph(ch))?;
        let mut data = PathData(String::new());
        self.face.outline_glyph(glyph, &mut data);
        Ok(data.0)
    }

    /// `<path>` definitions for every character in `chars`, keyed by [`glyph_id`].
    pub fn defs(
        &self,
        chars: impl IntoIterator<Item = char>,
    ) -> Result<BTreeMap<char, String>, VisualsError> {
        let mut defs = BTreeMap::new();
        for ch in chars {
            if let std::collections::btree_map::Entry::Vacant(slot) = defs.entry(ch) {
                slot.insert(self.outline(ch)?);
            }
        }
        Ok(defs)
    }
}

/// The id of `ch`'s glyph definition in an SVG.
pub fn glyph_id(ch: char) -> String {
    format!("g{:x}", u32::from(ch))
}

struct PathData(String);

fn num(value: f32) -> String {
    let rounded = (value * 10.0).round() / 10.0;
    let text = format!("{rounded:.1}");
    text.strip_suffix(".0").unwrap_or(&text).to_owned()
}

impl ttf_parser::OutlineBuilder for PathData {
    fn move_to(&mut self, x: f32, y: f32) {
        let _ = write!(self.0, "M{} {}", num(x), num(y));
    }
    fn line_to(&mut self, x: f32, y: f32) {
        let _ = write!(self.0, "L{} {}", num(x), num(y));
    }
    fn quad_to(&mut self, x1: f32, y1: f32, x: f32, y: f32) {
        let _ = write!(self.0, "Q{} {} {} {}", num(x1), num(y1), num(x), num(y));
    }
    fn curve_to(&mut self, x1: f32, y1: f32, x2: f32, y2: f32, x: f32, y: f32) {
        let _ = write!(
            self.0,
            "C{} {} {} {} {} {}",
            num(x1),
            num(y1),
            num(x2),
            num(y2),
            num(x),
            num(y)
        );
    }
    fn close(&mut self) {
        self.0.push('Z');
    }
}
