//! `pipeline visuals`: the committed docs/visuals are current; rendering is repeatable;
//! one flipped byte in any file, or visuals rendered from other evidence (even with a
//! manifest whose digests were recomputed), fail the check naming the file; the auditor
//! refuses a looping GIF; the checkpoint view drawn from another bench report, or a report
//! of another schema, or two reports, are refused naming the report.
use std::path::{Path, PathBuf};

use pipeline::visuals::{self, evidence, manifest::MANIFEST, VisualsError};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn committed_evidence() -> PathBuf {
    evidence::default_evidence_dir(&root()).expect("one committed evidence directory")
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

#[test]
fn committed_visuals_are_current() {
    let checked = visuals::check(&root(), &committed_evidence(), &root().join("docs/visuals"))
        .expect("docs/visuals is current; run `pipeline visuals render`");
    assert_eq!(checked.files, 14);
    assert_eq!(checked.gif_frames, 6);
}

#[test]
fn rendering_twice_gives_identical_bytes() {
    let first = visuals::render(&root(), &committed_evidence()).unwrap();
    let second = visuals::render(&root(), &committed_evidence()).unwrap();
    assert_eq!(first.files, second.files);
    let names: Vec<&str> = first.files.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, visuals::output_names());
    for (name, bytes) in &first.files {
        let text = String::from_utf8_lossy(bytes);
        for leak in ["/tmp/", "/root/", "/home/", "/work/"] {
            assert!(!text.contains(leak), "{name} holds a host path ({leak})");
        }
    }
}

#[test]
fn flipping_one_byte_of_any_file_fails_naming_it() {
    let evidence = committed_evidence();
    let fresh = visuals::render(&root(), &evidence).unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path().join("visuals");
    visuals::write(&fresh, &dir).unwrap();
    visuals::check_against(&fresh, &evidence, &dir).expect("a fresh rendering checks");
    for (name, bytes) in &fresh.files {
        for at in [0, bytes.len() / 2, bytes.len() - 1] {
            let mut flipped = bytes.clone();
            flipped[at] ^= 0x01;
            std::fs::write(dir.join(name), &flipped).unwrap();
            let error = visuals::check_against(&fresh, &evidence, &dir)
                .expect_err(&format!("a flipped byte at {at} of {name} must fail"));
            assert!(
                error.to_string().contains(name.as_str()),
                "flipping byte {at} of {name} failed without naming it: {error}"
            );
        }
        std::fs::write(dir.join(name), bytes).unwrap();
    }
    std::fs::write(dir.join("extra.svg"), b"<svg/>").unwrap();
    let error = visuals::check_against(&fresh, &evidence, &dir).unwrap_err();
    assert!(matches!(error, VisualsError::Unexpected { ref name } if name == "extra.svg"));
}

#[test]
fn visuals_rendered_from_other_evidence_fail_even_with_recomputed_digests() {
    let committed = committed_evidence();
    let scratch = tempfile::tempdir().unwrap();
    let name = committed.file_name().unwrap();
    let other = scratch.path().join("evidence").join(name);
    copy_dir(&committed, &other);
    // Another verify-bundle transcript: one more stderr line, still a valid transcript.
    let transcript = other.join("transcripts/commit-after-rename.verify-bundle.txt");
    let text = std::fs::read_to_string(&transcript).unwrap();
    let text = text.replace("--- stderr ---\n", "--- stderr ---\nanother line\n");
    std::fs::write(&transcript, text).unwrap();

    let elsewhere = visuals::render(&root(), &other).expect("the altered copy renders");
    let out = scratch.path().join("visuals");
    visuals::write(&elsewhere, &out).unwrap();
    let fresh = visuals::render(&root(), &committed).unwrap();
    let error = visuals::check_against(&fresh, &committed, &out).unwrap_err();
    match &error {
        VisualsError::RenderedFromOther { name, input } => {
            assert_eq!(name, visuals::TRANSCRIPTS_PNG);
            assert!(
                input.ends_with("transcripts/commit-after-rename.verify-bundle.txt"),
                "{input}"
            );
        }
        other => panic!("expected RenderedFromOther, got {other}"),
    }

    // The same pictures with a manifest that records the committed inputs (every digest
    // recomputed) still fail: the pictures are not those of the committed evidence.
    let mut manifest = elsewhere.manifest.clone();
    manifest.inputs = fresh.manifest.inputs.clone();
    let mut bytes = shardlift::core::canonical::encode(&manifest).unwrap();
    bytes.push(b'\n');
    std::fs::write(out.join(MANIFEST), bytes).unwrap();
    let error = visuals::check_against(&fresh, &committed, &out).unwrap_err();
    assert!(
        matches!(&error, VisualsError::RenderedFromOther { name, .. } if name == visuals::TRANSCRIPTS_PNG),
        "{error}"
    );
}

#[test]
fn the_auditor_refuses_a_looping_gif() {
    let evidence = committed_evidence();
    let fresh = visuals::render(&root(), &evidence).unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path().join("visuals");
    visuals::write(&fresh, &dir).unwrap();
    visuals::audit::audit(&evidence, &dir).expect("the fresh rendering passes the audit");

    // The same frames, indexed as they are, with a NETSCAPE2.0 looping extension.
    let gif_path = dir.join(visuals::WORKFLOW_GIF);
    let bytes = std::fs::read(&gif_path).unwrap();
    let mut options = gif::DecodeOptions::new();
    options.set_color_output(gif::ColorOutput::Indexed);
    let mut decoder = options.read_info(bytes.as_slice()).unwrap();
    let (width, height) = (decoder.width(), decoder.height());
    let mut frames = Vec::new();
    while let Some(frame) = decoder.read_next_frame().unwrap() {
        frames.push(frame.clone());
    }
    let mut looping = Vec::new();
    {
        let mut encoder = gif::Encoder::new(&mut looping, width, height, &[]).unwrap();
        encoder.set_repeat(gif::Repeat::Infinite).unwrap();
        for frame in &frames {
            encoder.write_frame(frame).unwrap();
        }
    }
    std::fs::write(&gif_path, looping).unwrap();
    let error = visuals::audit::audit(&evidence, &dir).unwrap_err();
    assert!(matches!(error, VisualsError::AuditLoops { .. }), "{error}");
}

#[test]
fn writing_into_a_path_that_is_a_file_is_a_durable_error_and_leaves_the_file() {
    let fresh = visuals::render(&root(), &committed_evidence()).unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let out = scratch.path().join("not-a-directory");
    std::fs::write(&out, b"keep me").unwrap();
    let error = visuals::write(&fresh, &out).expect_err("a file is not a directory");
    assert!(matches!(error, VisualsError::Durable(_)), "{error:?}");
    assert_eq!(std::fs::read(&out).unwrap(), b"keep me");
}

/// A scratch root holding RFC 0001 and the committed bench report, changed by `edit`.
fn root_with_bench_report(edit: impl Fn(&str) -> String) -> (tempfile::TempDir, String) {
    let scratch = tempfile::tempdir().unwrap();
    let rfc = scratch.path().join(evidence::RFC_PATH);
    std::fs::create_dir_all(rfc.parent().unwrap()).unwrap();
    std::fs::copy(root().join(evidence::RFC_PATH), &rfc).unwrap();
    let (name, bytes, _) = visuals::bench::read(&root()).expect("the committed report");
    let copy = scratch.path().join(&name);
    std::fs::create_dir_all(copy.parent().unwrap()).unwrap();
    std::fs::write(&copy, edit(std::str::from_utf8(&bytes).unwrap())).unwrap();
    (scratch, name)
}

#[test]
fn a_view_drawn_from_another_bench_report_fails_naming_the_report() {
    // Another run: one figure's median changed, still a valid report.
    let (other_root, name) = root_with_bench_report(|text| {
        let mut report: serde_json::Value = serde_json::from_str(text).unwrap();
        let median = &mut report["figures"]["disk_write"]["median_s"];
        *median = serde_json::Value::from(median.as_f64().unwrap() * 2.0);
        serde_json::to_string_pretty(&report).unwrap()
    });
    let committed = committed_evidence();
    let elsewhere = visuals::render(other_root.path(), &committed).expect("it renders");
    let scratch = tempfile::tempdir().unwrap();
    let out = scratch.path().join("visuals");
    visuals::write(&elsewhere, &out).unwrap();
    let fresh = visuals::render(&root(), &committed).unwrap();
    match visuals::check_against(&fresh, &committed, &out).unwrap_err() {
        VisualsError::RenderedFromOther { name: view, input } => {
            assert_eq!(view, visuals::bench::VIEW);
            assert_eq!(input, name);
        }
        other => panic!("expected RenderedFromOther, got {other}"),
    }
}

#[test]
fn a_bench_report_of_another_schema_or_two_reports_are_refused() {
    let (wrong, _) = root_with_bench_report(|text| {
        text.replace(
            "\"shardlift.bench.checkpoint\"",
            "\"shardlift.bench.other\"",
        )
    });
    let error = visuals::bench::read(wrong.path()).unwrap_err();
    assert!(
        matches!(&error, VisualsError::BenchReport { reason, .. } if reason.contains("schema")),
        "{error}"
    );
    let (two, name) = root_with_bench_report(str::to_owned);
    let second = two.path().join(name.replace("checkpoint-", "checkpoint-0"));
    std::fs::copy(two.path().join(&name), second).unwrap();
    let error = visuals::bench::read(two.path()).unwrap_err();
    assert!(
        matches!(&error, VisualsError::BenchReport { reason, .. } if reason.contains("expected one")),
        "{error}"
    );
}
