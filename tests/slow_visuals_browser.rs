//! Each committed SVG of docs/visuals renders in a real browser: headless Chromium
//! (Debian's `chromium`, installed by ci/setup) screenshots it, and the screenshot must
//! be neither blank nor an error page: it must show the picture's claim-boundary band
//! (its own pale yellow, #fff8c5) and dark text ink (#1f2328) drawn from the glyph paths.
use std::path::{Path, PathBuf};
use std::process::Command;

const CLAIM_BAND: [u8; 3] = [0xff, 0xf8, 0xc5];
const INK: [u8; 3] = [0x1f, 0x23, 0x28];

fn visuals_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/visuals")
}

/// The screenshot's RGB pixels (decoded with the png crate).
fn pixels(path: &Path) -> Vec<[u8; 3]> {
    let file = std::fs::File::open(path).expect("chromium wrote a screenshot");
    let mut decoder = png::Decoder::new(std::io::BufReader::new(file));
    decoder.set_transformations(png::Transformations::EXPAND | png::Transformations::STRIP_16);
    let mut reader = decoder.read_info().expect("the screenshot is a PNG");
    let mut buffer = vec![0; reader.output_buffer_size().expect("a sane size")];
    let info = reader
        .next_frame(&mut buffer)
        .expect("the screenshot decodes");
    let channels = info.color_type.samples();
    buffer[..info.buffer_size()]
        .chunks_exact(channels)
        .map(|p| [p[0], p[1], p[2]])
        .collect()
}

#[test]
fn every_svg_renders_in_headless_chromium() {
    let mut svgs: Vec<PathBuf> = std::fs::read_dir(visuals_dir())
        .expect("docs/visuals exists")
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "svg"))
        .collect();
    svgs.sort();
    assert_eq!(svgs.len(), 11, "docs/visuals holds the eleven SVG views");
    let scratch = tempfile::tempdir().expect("a scratch directory");
    for svg in svgs {
        let name = svg.file_name().unwrap().to_string_lossy().into_owned();
        let shot = scratch.path().join(format!("{name}.png"));
        let profile = scratch.path().join(format!("{name}.profile"));
        let url = format!("file://{}", svg.canonicalize().unwrap().display());
        let output = Command::new("timeout")
            .arg("120")
            .arg("chromium")
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--hide-scrollbars",
                "--window-size=960,800",
            ])
            .arg(format!("--user-data-dir={}", profile.display()))
            .arg(format!("--screenshot={}", shot.display()))
            .arg(&url)
            .output()
            .expect("chromium runs (Debian's chromium; ci/setup installs it)");
        assert!(
            output.status.success(),
            "chromium failed on {name}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let pixels = pixels(&shot);
        let band = pixels.iter().filter(|p| **p == CLAIM_BAND).count();
        let ink = pixels.iter().filter(|p| **p == INK).count();
        let white = pixels.iter().filter(|p| **p == [255, 255, 255]).count();
        assert!(white < pixels.len(), "{name}: the screenshot is blank");
        assert!(
            band > 10_000,
            "{name}: no claim-boundary band in the screenshot ({band} pixels): an error page?"
        );
        assert!(
            ink > 500,
            "{name}: no text ink in the screenshot ({ink} pixels)"
        );
    }
}
