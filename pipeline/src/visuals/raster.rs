//! Rasterising the drawn SVGs (resvg/tiny-skia) and encoding them (png, gif). The
//! renderer never decodes an image: the pixel digests it records are of the pixels it
//! encoded, so the auditor's decoding ([`super::audit`]) is the only decoder.
use resvg::tiny_skia::Pixmap;
use resvg::usvg;

use super::error::VisualsError;

/// Straight (non-premultiplied) RGBA pixels of a raster.
pub struct Rgba {
    /// Width, in pixels.
    pub width: u32,
    /// Height, in pixels.
    pub height: u32,
    /// `width * height * 4` bytes, row-major.
    pub pixels: Vec<u8>,
}

/// Rasterises `svg` at 1:1 on an opaque page (every pixel ends with alpha 255, so
/// premultiplied and straight RGBA are the same bytes).
pub fn rasterise(name: &str, svg: &str) -> Result<Rgba, VisualsError> {
    let options = usvg::Options::default();
    let tree = usvg::Tree::from_str(svg, &options).map_err(|source| VisualsError::Svg {
        name: name.to_owned(),
        source,
    })?;
    let size = tree.size().to_int_size();
    let (width, height) = (size.width(), size.height());
    let mut pixmap = Pixmap::new(width, height).ok_or_else(|| VisualsError::RasterSize {
        name: name.to_owned(),
        width,
        height,
    })?;
    pixmap.fill(resvg::tiny_skia::Color::WHITE);
    resvg::render(
        &tree,
        resvg::tiny_skia::Transform::identity(),
        &mut pixmap.as_mut(),
    );
    Ok(Rgba {
        width,
        height,
        pixels: pixmap.take_demultiplied(),
    })
}

/// Encodes `image` as an 8-bit RGBA PNG with fixed settings and no ancillary chunks.
pub fn encode_png(name: &str, image: &Rgba) -> Result<Vec<u8>, VisualsError> {
    let error = |source| VisualsError::PngEncode {
        name: name.to_owned(),
        source,
    };
    let mut out = Vec::new();
    {
        let mut encoder = png::Encoder::new(&mut out, image.width, image.height);
        encoder.set_color(png::ColorType::Rgba);
        encoder.set_depth(png::BitDepth::Eight);
        encoder.set_compression(png::Compression::High);
        let mut writer = encoder.write_header().map_err(error)?;
        writer.write_image_data(&image.pixels).map_err(error)?;
        writer.finish().map_err(error)?;
    }
    Ok(out)
}

/// One GIF frame: its quantised pixels as the palette maps them back to RGBA.
pub struct GifFrame {
    frame: gif::Frame<'static>,
    /// The frame's pixels as the palette maps them back, RGBA8, row-major.
    pub rgba: Vec<u8>,
}

/// Quantises `image` (NeuQuant, as the gif crate does it) into a frame shown for
/// `delay` hundredths of a second.
pub fn gif_frame(name: &str, image: &Rgba, delay: u16) -> Result<GifFrame, VisualsError> {
    let too_large = || VisualsError::RasterSize {
        name: name.to_owned(),
        width: image.width,
        height: image.height,
    };
    let width = u16::try_from(image.width).map_err(|_| too_large())?;
    let height = u16::try_from(image.height).map_err(|_| too_large())?;
    let mut pixels = image.pixels.clone();
    let mut frame = gif::Frame::from_rgba_speed(width, height, &mut pixels, 10);
    frame.delay = delay;
    let palette = frame.palette.clone().unwrap_or_default();
    let mut rgba = Vec::with_capacity(frame.buffer.len() * 4);
    for &index in frame.buffer.iter() {
        let at = usize::from(index) * 3;
        let rgb = palette.get(at..at + 3).unwrap_or(&[0, 0, 0]);
        if frame.transparent == Some(index) {
            rgba.extend_from_slice(&[0, 0, 0, 0]);
        } else {
            rgba.extend_from_slice(rgb);
            rgba.push(255);
        }
    }
    Ok(GifFrame { frame, rgba })
}

/// Encodes the frames as a GIF that plays once: no looping (NETSCAPE2.0) extension is
/// written.
pub fn encode_gif(
    name: &str,
    width: u32,
    height: u32,
    frames: &[GifFrame],
) -> Result<Vec<u8>, VisualsError> {
    let error = |source| VisualsError::GifEncode {
        name: name.to_owned(),
        source,
    };
    let too_large = || VisualsError::RasterSize {
        name: name.to_owned(),
        width,
        height,
    };
    let w = u16::try_from(width).map_err(|_| too_large())?;
    let h = u16::try_from(height).map_err(|_| too_large())?;
    let mut out = Vec::new();
    {
        let mut encoder = gif::Encoder::new(&mut out, w, h, &[]).map_err(error)?;
        for frame in frames {
            encoder.write_frame(&frame.frame).map_err(error)?;
        }
        encoder.into_inner().map_err(error)?;
    }
    Ok(out)
}
