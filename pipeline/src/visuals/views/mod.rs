//! The ten views, the transcript page rasterised to PNG, and the workflow frames of the
//! GIF: each drawn only from [`Evidence`], each carrying its claim boundary in words.
use shardlift::core::digest::Digest;

use super::evidence::{Evidence, Run};
use super::svg::*;

const WIDTH: f32 = 960.0;

/// One step of the workflow, as the GIF's fact records and the workflow view state it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepFacts {
    /// The step's name in [`STEPS`], e.g. `sigkill`.
    pub step: &'static str,
    /// Its heading in [`STEPS`], e.g. `1 recorded real SIGKILL`.
    pub heading: &'static str,
    /// Per run (barrier order): (name, value) pairs, each copied from a recorded field.
    pub runs: Vec<(String, Vec<(&'static str, String)>)>,
}

/// The names of the six workflow steps, in order.
pub const STEPS: [(&str, &str); 6] = [
    ("sigkill", "1 recorded real SIGKILL"),
    ("installation", "2 commit-record installation boundary"),
    ("recovery", "3 fresh recovery choice"),
    ("replay", "4 replay or no replay"),
    ("reshard", "5 offline reshard W4 -> W3"),
    ("final", "6 final checkpoint"),
];

fn yes(value: bool) -> &'static str {
    if value {
        "yes"
    } else {
        "no"
    }
}

fn short(digest: &Digest) -> String {
    let hex = digest.to_hex();
    format!("{}…", &hex[..16])
}

fn step_facts(index: usize, run: &Run) -> Vec<(&'static str, String)> {
    let e = &run.evidence;
    match index {
        0 => vec![
            ("target_barrier", e.kill.target_barrier.clone()),
            ("signal", e.kill.signal.to_string()),
            ("reaped", e.kill.reaped.to_string()),
            (
                "acknowledged_events",
                e.kill.acknowledged_events.len().to_string(),
            ),
        ],
        1 => vec![
            (
                "candidate_generation",
                e.kill.candidate_generation.to_string(),
            ),
            (
                "candidate_installed",
                e.kill.candidate_installed.to_string(),
            ),
        ],
        2 => vec![
            (
                "selected_generation",
                e.recovery.selected_generation.to_string(),
            ),
            ("selected_step", e.recovery.selected_step.to_string()),
            ("latest_status", e.recovery.latest_status.clone()),
        ],
        3 => vec![
            ("replayed_batches", e.replayed_batches.to_string()),
            ("target_step", e.target_step.to_string()),
        ],
        4 => vec![
            ("source_generation", e.reshard.source_generation.to_string()),
            ("generation", e.reshard.generation.to_string()),
            ("workers_before", e.reshard.workers_before.to_string()),
            ("workers_after", e.reshard.workers_after.to_string()),
        ],
        _ => vec![
            (
                "final_generation",
                e.final_checkpoint.generation.to_string(),
            ),
            ("final_step", e.final_checkpoint.step.to_string()),
            ("final_workers", e.final_checkpoint.workers.to_string()),
            ("status", run.audit.status.clone()),
        ],
    }
}

/// The fact records of the six workflow steps.
pub fn workflow_facts(evidence: &Evidence) -> Vec<StepFacts> {
    STEPS
        .iter()
        .enumerate()
        .map(|(index, (step, heading))| StepFacts {
            step,
            heading,
            runs: evidence
                .runs
                .iter()
                .map(|run| (run.barrier.name().to_owned(), step_facts(index, run)))
                .collect(),
        })
        .collect()
}

fn step_lines(index: usize, run: &Run) -> Vec<String> {
    let e = &run.evidence;
    match index {
        0 => vec![
            format!("signal {} at {}", e.kill.signal, e.kill.target_barrier),
            format!("reaped: {}", yes(e.kill.reaped)),
            format!(
                "{} events acknowledged before it",
                e.kill.acknowledged_events.len()
            ),
        ],
        1 => vec![
            format!("candidate generation {}", e.kill.candidate_generation),
            format!("installed in commits/: {}", yes(e.kill.candidate_installed)),
        ],
        2 => vec![
            format!(
                "selected generation {} (step {})",
                e.recovery.selected_generation, e.recovery.selected_step
            ),
            format!("valid generations {:?}", e.recovery.valid_generations),
            format!("LATEST reported {}, not trusted", e.recovery.latest_status),
        ],
        3 => vec![
            if e.replayed_batches == 0 {
                "no replay (0 batches)".to_owned()
            } else {
                format!("replayed {} batch(es)", e.replayed_batches)
            },
            format!(
                "W{} continued to step {}",
                e.recovered_w4.workers, e.recovered_w4.step
            ),
        ],
        4 => vec![
            format!(
                "generation {} -> generation {}",
                e.reshard.source_generation, e.reshard.generation
            ),
            format!(
                "W{} -> W{}, {} chunk objects written",
                e.reshard.workers_before, e.reshard.workers_after, e.reshard.chunk_objects_written
            ),
        ],
        _ => vec![
            format!(
                "generation {}, step {}, W{}",
                e.final_checkpoint.generation, e.final_checkpoint.step, e.final_checkpoint.workers
            ),
            format!("run status: {}", run.audit.status),
        ],
    }
}

/// The claim boundary every picture carries.
pub fn claim(evidence: &Evidence) -> [String; 2] {
    [
        format!(
            "Claim boundary: captured fields of evidence/{}, drawn as recorded.",
            evidence.name
        ),
        "Not an independent recomputation; not a benchmark.".to_owned(),
    ]
}

fn page(evidence: &Evidence, height: f32, title: &str, shows: &str) -> Svg {
    let [line1, line2] = claim(evidence);
    let mut svg = Svg::new(WIDTH, height, title, &format!("{shows} {line1} {line2}"));
    svg.text(30.0, 38.0, 20.0, INK, title);
    svg.text(30.0, 60.0, 12.0, MUTED, shows);
    svg.rect(0.0, height - 48.0, WIDTH, 48.0, WARN_FILL, None);
    svg.text(30.0, height - 28.0, 12.0, INK, &line1);
    svg.text(30.0, height - 11.0, 12.0, INK, &line2);
    svg
}

fn column_x(index: usize) -> f32 {
    30.0 + index as f32 * 465.0
}

/// View 1 (and the GIF's frames, with one step highlighted).
pub fn workflow(evidence: &Evidence, highlight: Option<usize>) -> Svg {
    let mut svg = page(
        evidence,
        760.0,
        "Workflow of one run, both barriers",
        "The six recorded steps from the SIGKILL to the final W3 checkpoint, per run.",
    );
    for (column, run) in evidence.runs.iter().enumerate() {
        let x = column_x(column);
        svg.text(x, 92.0, 15.0, NOTE, &format!("killed at {}", run.barrier));
        let mut y = 104.0;
        for (index, (_, heading)) in STEPS.iter().enumerate() {
            let (fill, stroke) = match highlight {
                Some(h) if h == index => (NOTE_FILL, NOTE),
                Some(_) => (PANEL, EDGE),
                None if index == 0 => (BAD_FILL, BAD),
                None => (PANEL, EDGE),
            };
            let h = svg.card(
                x,
                y,
                435.0,
                (fill, stroke),
                heading,
                &step_lines(index, run),
            );
            if index + 1 < STEPS.len() {
                svg.arrow(x + 40.0, y + h, x + 40.0, y + 79.0 + 24.0, MUTED);
            }
            y += 79.0 + 24.0;
        }
    }
    svg
}

/// View 2.
pub fn cli_evidence(evidence: &Evidence) -> Svg {
    let rows = cli_evidence_rows(evidence);
    let height = 150.0 + 24.0 * rows.len() as f32 + 60.0;
    let mut svg = page(
        evidence,
        height,
        "Captured CLI evidence: shardlift verify-bundle",
        "The path-free fields of verify-bundle's stdout record, per run, from the committed transcripts.",
    );
    let xs = [30.0, 290.0, 620.0];
    svg.text(xs[0], 100.0, 13.0, MUTED, "field");
    for (i, run) in evidence.runs.iter().enumerate() {
        svg.text(xs[i + 1], 100.0, 13.0, NOTE, run.barrier.name());
    }
    for (row, (field, values)) in rows.iter().enumerate() {
        let y = 112.0 + 24.0 * row as f32;
        if row % 2 == 0 {
            svg.rect(20.0, y, WIDTH - 40.0, 24.0, PANEL, None);
        }
        svg.text(xs[0], y + 17.0, 13.0, INK, field);
        for (i, value) in values.iter().enumerate() {
            svg.text(xs[i + 1], y + 17.0, 13.0, INK, value);
        }
    }
    svg
}

/// View 2's rows: each path-free field of verify-bundle's record, per run.
fn cli_evidence_rows(evidence: &Evidence) -> Vec<(&'static str, Vec<String>)> {
    vec![
        ("status", map(evidence, |r| r.verify_output.status.clone())),
        (
            "run_status",
            map(evidence, |r| r.verify_output.run_status.clone()),
        ),
        (
            "barrier",
            map(evidence, |r| r.verify_output.outcome.barrier.clone()),
        ),
        (
            "candidate_installed",
            map(evidence, |r| {
                r.verify_output.outcome.candidate_installed.to_string()
            }),
        ),
        (
            "selected_generation",
            map(evidence, |r| {
                r.verify_output.outcome.selected_generation.to_string()
            }),
        ),
        (
            "selected_step",
            map(evidence, |r| {
                r.verify_output.outcome.selected_step.to_string()
            }),
        ),
        (
            "replayed_batches",
            map(evidence, |r| {
                r.verify_output.outcome.replayed_batches.to_string()
            }),
        ),
        (
            "final_checkpoint",
            map(evidence, |r| {
                let f = &r.verify_output.outcome.final_checkpoint;
                format!(
                    "generation {}, step {}, W{}",
                    f.generation, f.step, f.workers
                )
            }),
        ),
        (
            "logit_probe_equal",
            map(evidence, |r| {
                r.verify_output.outcome.logit_probe_equal.to_string()
            }),
        ),
        (
            "logical_state_roots_equal",
            map(evidence, |r| {
                r.verify_output
                    .outcome
                    .logical_state_roots_equal
                    .to_string()
            }),
        ),
        (
            "ledger_digests_equal",
            map(evidence, |r| {
                r.verify_output.outcome.ledger_digests_equal.to_string()
            }),
        ),
        (
            "worker_exits",
            map(evidence, |r| {
                r.verify_output.outcome.worker_exits.to_string()
            }),
        ),
        (
            "audit_sha256",
            map(evidence, |r| short(&r.verify_output.audit_sha256)),
        ),
    ]
}

fn map(evidence: &Evidence, f: impl Fn(&Run) -> String) -> Vec<String> {
    evidence.runs.iter().map(f).collect()
}

/// View 3.
pub fn outcomes(evidence: &Evidence) -> Svg {
    let mut svg = page(
        evidence,
        400.0,
        "Outcomes per run",
        "Candidate installed, generation recovery selected, batches replayed, final W3 step, as the audits record them.",
    );
    let labels = [
        "candidate installed",
        "selected generation",
        "replayed batches",
        "final W3 step",
    ];
    for (column, run) in evidence.runs.iter().enumerate() {
        let x = column_x(column);
        svg.text(x, 100.0, 15.0, NOTE, run.barrier.name());
        let a = &run.audit;
        let values = [
            yes(a.candidate_installed).to_owned(),
            a.selected_generation.to_string(),
            a.replayed_batches.to_string(),
            format!(
                "{} (W{})",
                a.final_checkpoint.step, a.final_checkpoint.workers
            ),
        ];
        for (i, (label, value)) in labels.iter().zip(values).enumerate() {
            let bx = x + (i % 2) as f32 * 220.0;
            let by = 115.0 + (i / 2) as f32 * 110.0;
            svg.rect(bx, by, 205.0, 95.0, PANEL, Some(EDGE));
            svg.text(bx + 12.0, by + 24.0, 13.0, MUTED, label);
            svg.text(bx + 12.0, by + 70.0, 32.0, INK, &value);
        }
    }
    svg
}

fn phase_color(event: &str) -> &'static str {
    match event.split('-').next() {
        Some("object") => "#8c959f",
        Some("manifest") => "#54aeff",
        Some("commit") => "#bf8700",
        _ => "#8250df",
    }
}

/// View 4.
pub fn fault_boundary(evidence: &Evidence) -> Svg {
    let mut svg = page(
        evidence,
        560.0,
        "Fault boundary: the acknowledged prefix, then SIGKILL",
        "Each square is one barrier event the parent acknowledged, in order; red is the target event, answered with SIGKILL.",
    );
    for (row, run) in evidence.runs.iter().enumerate() {
        let kill = &run.evidence.kill;
        let y0 = 95.0 + row as f32 * 200.0;
        svg.text(30.0, y0, 15.0, NOTE, &format!("killed at {}", run.barrier));
        let per_row = 60usize;
        let cell = 14.0;
        let mut last = (30.0, y0 + 12.0);
        for (i, event) in kill.acknowledged_events.iter().enumerate() {
            let x = 30.0 + (i % per_row) as f32 * cell;
            let y = y0 + 12.0 + (i / per_row) as f32 * cell;
            svg.rect(x, y, cell - 3.0, cell - 3.0, phase_color(event), None);
            last = (x + cell, y);
        }
        svg.rect(last.0, last.1, cell - 3.0, cell - 3.0, BAD, None);
        let lines = [
            format!(
                "{} events acknowledged; the last: {}",
                kill.acknowledged_events.len(),
                kill.acknowledged_events
                    .last()
                    .map(String::as_str)
                    .unwrap_or("none")
            ),
            format!(
                "unacknowledged target event: {} -> SIGKILL (signal {}), reaped: {}",
                kill.unacknowledged_event,
                kill.signal,
                yes(kill.reaped)
            ),
            format!(
                "candidate generation {} installed: {}",
                kill.candidate_generation,
                yes(kill.candidate_installed)
            ),
        ];
        for (i, line) in lines.iter().enumerate() {
            svg.text(30.0, y0 + 96.0 + 18.0 * i as f32, 13.0, INK, line);
        }
    }
    let legend = [
        ("object-*", phase_color("object")),
        ("manifest-*", phase_color("manifest")),
        ("commit-*", phase_color("commit")),
        ("latest-*", phase_color("latest")),
        ("target (SIGKILL)", BAD),
    ];
    for (i, (label, color)) in legend.iter().enumerate() {
        let x = 30.0 + i as f32 * 180.0;
        svg.rect(x, 478.0, 11.0, 11.0, color, None);
        svg.text(x + 16.0, 488.0, 12.0, MUTED, label);
    }
    svg
}

/// View 9.
pub fn protocol(evidence: &Evidence) -> Svg {
    let mut svg = page(
        evidence,
        720.0,
        "Protocol: the writer's 16 barriers (RFC 0001)",
        "The barriers in RFC order, from the barrier enum; the demo's two kill points as the bundles record them.",
    );
    for (i, barrier) in evidence.protocol.iter().enumerate() {
        let y = 84.0 + 34.0 * i as f32;
        let killed: Vec<&Run> = evidence
            .runs
            .iter()
            .filter(|run| run.evidence.kill.target_barrier == barrier.name())
            .collect();
        let (fill, stroke) = if killed.is_empty() {
            (PANEL, EDGE)
        } else {
            (BAD_FILL, BAD)
        };
        svg.rect(30.0, y, 420.0, 28.0, fill, Some(stroke));
        svg.rect(30.0, y, 8.0, 28.0, phase_color(barrier.name()), None);
        svg.text(
            48.0,
            y + 19.0,
            13.0,
            INK,
            &format!("{:>2}. {}", i + 1, barrier.name()),
        );
        if barrier.commit_visible() && !evidence.protocol[..i].iter().any(|b| b.commit_visible()) {
            svg.line(20.0, y - 3.0, 940.0, y - 3.0, NOTE, true);
        }
        for run in killed {
            svg.arrow(560.0, y + 14.0, 458.0, y + 14.0, BAD);
            svg.text(
                570.0,
                y + 19.0,
                12.0,
                INK,
                &format!(
                    "demo kill point: candidate installed: {}",
                    yes(run.evidence.kill.candidate_installed)
                ),
            );
        }
    }
    svg.line(30.0, 648.0, 70.0, 648.0, NOTE, true);
    svg.text(
        80.0,
        652.0,
        12.0,
        NOTE,
        "from the barrier below this line on, the commit record is visible in commits/",
    );
    svg
}

/// View 10.
pub fn bundle(evidence: &Evidence) -> Svg {
    let mut svg = page(
        evidence,
        520.0,
        "Evidence bundle: four records, audit.json last",
        "Each bundle's files in installation order with their sizes and SHA-256 prefixes; audit.json is the commit marker.",
    );
    for (row, run) in evidence.runs.iter().enumerate() {
        let y0 = 95.0 + row as f32 * 190.0;
        svg.text(30.0, y0, 15.0, NOTE, &format!("bundles/{}", run.barrier));
        for (i, (name, bytes, digest)) in run.files.iter().enumerate() {
            let x = 30.0 + i as f32 * 228.0;
            let last = i + 1 == run.files.len();
            let (fill, stroke) = if last {
                (GOOD_FILL, GOOD)
            } else {
                (PANEL, EDGE)
            };
            let mut lines = vec![format!("{bytes} bytes"), short(digest)];
            if last {
                lines.push("installed last".into());
            }
            svg.card(x, y0 + 12.0, 215.0, (fill, stroke), name, &lines);
            if !last {
                svg.arrow(x + 215.0, y0 + 40.0, x + 228.0, y0 + 40.0, MUTED);
            }
        }
        svg.text(
            30.0,
            y0 + 120.0,
            12.0,
            MUTED,
            "audit.json binds the other three by SHA-256; recovery-evidence.json binds both evaluations.",
        );
    }
    svg
}

/// The page rasterised to `transcripts.png`: both committed verify-bundle transcripts.
pub fn transcripts(evidence: &Evidence) -> Svg {
    let wrap = 118usize;
    let mut lines: Vec<(String, &str)> = Vec::new();
    for run in &evidence.runs {
        lines.push((
            format!("transcripts/{}.verify-bundle.txt", run.barrier),
            NOTE,
        ));
        for line in run.verify_transcript.lines() {
            let chars: Vec<char> = line.chars().collect();
            for chunk in chars.chunks(wrap) {
                lines.push((chunk.iter().collect(), INK));
            }
            if chars.is_empty() {
                lines.push((String::new(), INK));
            }
        }
        lines.push((String::new(), INK));
    }
    let height = 90.0 + 16.0 * lines.len() as f32 + 60.0;
    let mut svg = page(
        evidence,
        height,
        "Committed verify-bundle transcripts",
        "The two transcripts as committed (paths already replaced by placeholders), wrapped at 118 columns.",
    );
    for (i, (line, color)) in lines.iter().enumerate() {
        svg.text(30.0, 92.0 + 16.0 * i as f32, 11.0, color, line);
    }
    svg
}

/// The ten views, named as written.
pub fn views(evidence: &Evidence) -> Vec<(&'static str, Svg)> {
    vec![
        ("01-workflow.svg", workflow(evidence, None)),
        ("02-cli-evidence.svg", cli_evidence(evidence)),
        ("03-outcomes.svg", outcomes(evidence)),
        ("04-fault-boundary.svg", fault_boundary(evidence)),
        ("05-lineage.svg", lineage(evidence)),
        ("06-projection.svg", projection(evidence)),
        ("07-ledger.svg", ledger(evidence)),
        ("08-topology.svg", topology(evidence)),
        ("09-protocol.svg", protocol(evidence)),
        ("10-bundle.svg", bundle(evidence)),
    ]
}

mod state;
pub use state::{ledger, lineage, projection, topology};
