//! A small SVG writer: rectangles, lines and text, the text drawn as `<use>`s of glyph
//! outlines defined once per picture. Coordinates are written with one decimal, so the
//! bytes depend only on what is drawn.
use std::collections::BTreeSet;
use std::fmt::Write as _;

use super::error::VisualsError;
use super::font::{glyph_id, Font};

/// Primary text.
pub const INK: &str = "#1f2328";
/// Secondary text, labels and arrows.
pub const MUTED: &str = "#59636e";
/// The background.
pub const PAPER: &str = "#ffffff";
/// Neutral panel fill.
pub const PANEL: &str = "#f6f8fa";
/// Neutral panel edge.
pub const EDGE: &str = "#d0d7de";
/// Good states (equal, committed): edge.
pub const GOOD: &str = "#1a7f37";
/// Good states: fill.
pub const GOOD_FILL: &str = "#dafbe1";
/// The kill and bad states (not equal): edge and mark.
pub const BAD: &str = "#cf222e";
/// The kill and bad states: fill.
pub const BAD_FILL: &str = "#ffebe9";
/// Headings and the highlighted step: edge and text.
pub const NOTE: &str = "#0969da";
/// The highlighted step: fill.
pub const NOTE_FILL: &str = "#ddf4ff";
/// The claim-boundary band.
pub const WARN_FILL: &str = "#fff8c5";

/// The advance of one character, as a fraction of the font size (DejaVu Sans Mono).
pub const ADVANCE: f32 = 1233.0 / 2048.0;

fn n(value: f32) -> String {
    let text = format!("{:.1}", (value * 10.0).round() / 10.0);
    text.strip_suffix(".0").unwrap_or(&text).to_owned()
}

/// `text` with `&`, `<`, `>` and `"` escaped for XML.
pub fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// One picture being drawn.
pub struct Svg {
    width: f32,
    height: f32,
    title: String,
    description: String,
    body: String,
    chars: BTreeSet<char>,
}

impl Svg {
    /// A `width` × `height` picture (pixels) with its title and description, on
    /// [`PAPER`].
    pub fn new(width: f32, height: f32, title: &str, description: &str) -> Self {
        let mut svg = Svg {
            width,
            height,
            title: title.to_owned(),
            description: description.to_owned(),
            body: String::new(),
            chars: BTreeSet::new(),
        };
        svg.rect(0.0, 0.0, width, height, PAPER, None);
        svg
    }

    /// Its width, in pixels.
    pub fn width(&self) -> f32 {
        self.width
    }

    /// A rounded rectangle at (`x`, `y`), `w` × `h`, filled, with an optional stroke.
    pub fn rect(&mut self, x: f32, y: f32, w: f32, h: f32, fill: &str, stroke: Option<&str>) {
        let stroke = stroke
            .map(|s| format!(" stroke=\"{s}\" stroke-width=\"1.5\""))
            .unwrap_or_default();
        let _ = writeln!(
            self.body,
            "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" rx=\"4\" fill=\"{fill}\"{stroke}/>",
            n(x),
            n(y),
            n(w),
            n(h)
        );
    }

    /// A line from (`x1`, `y1`) to (`x2`, `y2`), dashed or solid.
    pub fn line(&mut self, x1: f32, y1: f32, x2: f32, y2: f32, stroke: &str, dashed: bool) {
        let dash = if dashed {
            " stroke-dasharray=\"5 4\""
        } else {
            ""
        };
        let _ = writeln!(
            self.body,
            "<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"{stroke}\" stroke-width=\"1.5\"{dash}/>",
            n(x1),
            n(y1),
            n(x2),
            n(y2)
        );
    }

    /// A line ending in an arrow head at (x2, y2).
    pub fn arrow(&mut self, x1: f32, y1: f32, x2: f32, y2: f32, stroke: &str) {
        self.line(x1, y1, x2, y2, stroke, false);
        let (dx, dy) = (x2 - x1, y2 - y1);
        let len = (dx * dx + dy * dy).sqrt().max(1.0);
        let (ux, uy) = (dx / len, dy / len);
        let (bx, by) = (x2 - ux * 8.0, y2 - uy * 8.0);
        let _ = writeln!(
            self.body,
            "<path d=\"M{} {}L{} {}L{} {}Z\" fill=\"{stroke}\"/>",
            n(x2),
            n(y2),
            n(bx - uy * 4.0),
            n(by + ux * 4.0),
            n(bx + uy * 4.0),
            n(by - ux * 4.0)
        );
    }

    /// Text with its baseline at `y`, starting at `x`.
    pub fn text(&mut self, x: f32, y: f32, size: f32, color: &str, text: &str) {
        let scale = size / 2048.0;
        let _ = write!(
            self.body,
            "<g fill=\"{color}\" transform=\"translate({} {}) scale({} -{})\">",
            n(x),
            n(y),
            scale,
            scale
        );
        for (index, ch) in text.chars().enumerate() {
            if ch == ' ' {
                continue;
            }
            self.chars.insert(ch);
            let _ = write!(
                self.body,
                "<use xlink:href=\"#{}\" x=\"{}\"/>",
                glyph_id(ch),
                index as u32 * 1233
            );
        }
        self.body.push_str("</g>\n");
    }

    /// The width of `text` at `size`.
    pub fn measure(text: &str, size: f32) -> f32 {
        text.chars().count() as f32 * size * ADVANCE
    }

    /// Text centred on `cx`.
    pub fn text_centred(&mut self, cx: f32, y: f32, size: f32, color: &str, text: &str) {
        self.text(cx - Svg::measure(text, size) / 2.0, y, size, color, text);
    }

    /// A filled box with a bold-ish heading line and further lines below it; returns its
    /// height.
    pub fn card(
        &mut self,
        x: f32,
        y: f32,
        w: f32,
        (fill, stroke): (&str, &str),
        heading: &str,
        lines: &[String],
    ) -> f32 {
        let h = 28.0 + 17.0 * lines.len() as f32;
        self.rect(x, y, w, h, fill, Some(stroke));
        self.text(x + 10.0, y + 19.0, 13.0, INK, heading);
        for (i, line) in lines.iter().enumerate() {
            self.text(x + 10.0, y + 38.0 + 17.0 * i as f32, 12.0, MUTED, line);
        }
        h
    }

    /// The finished document, with the glyphs it uses defined once.
    pub fn finish(self, font: &Font<'_>) -> Result<String, VisualsError> {
        let defs = font.defs(self.chars.iter().copied())?;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" xmlns:xlink=\"http://www.w3.org/1999/xlink\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" role=\"img\" aria-labelledby=\"title desc\">",
            w = n(self.width),
            h = n(self.height)
        );
        let _ = writeln!(out, "<title id=\"title\">{}</title>", escape(&self.title));
        let _ = writeln!(
            out,
            "<desc id=\"desc\">{}</desc>",
            escape(&self.description)
        );
        out.push_str("<defs>\n");
        for (ch, path) in defs {
            let _ = writeln!(out, "<path id=\"{}\" d=\"{path}\"/>", glyph_id(ch));
        }
        out.push_str("</defs>\n");
        out.push_str(&self.body);
        out.push_str("</svg>\n");
        Ok(out)
    }
}
