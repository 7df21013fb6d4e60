//! The views of the state itself: its lineage through the demo, the projection that
//! shows placement changed and state did not, the digest ledger, and the W4 → W3 topology.
use super::*;
use shardlift::evidence::bundle::RecoveryEvidenceRecord;

/// View 5.
pub fn lineage(evidence: &Evidence) -> Svg {
    let mut svg = page(
        evidence,
        580.0,
        "Lineage: generations of both stores",
        "Reference-store states and crash-store generations; recovery's selection, the reshard and the W3 continuation.",
    );
    for (row, run) in evidence.runs.iter().enumerate() {
        let e = &run.evidence;
        let y0 = 90.0 + row as f32 * 220.0;
        svg.text(30.0, y0, 15.0, NOTE, &format!("killed at {}", run.barrier));
        lineage_reference_row(&mut svg, e, y0);
        lineage_crash_row(&mut svg, e, y0);
    }
    svg
}

/// Lineage, one run's reference-store row: every state, the evaluated checkpoint green.
fn lineage_reference_row(svg: &mut Svg, e: &RecoveryEvidenceRecord, y0: f32) {
    svg.text(30.0, y0 + 34.0, 12.0, MUTED, "reference store");
    let mut x = 160.0;
    for state in &e.reference {
        let checkpoint = state.step == e.reference_checkpoint.step;
        let label = if checkpoint {
            format!(
                "gen {} step {}",
                e.reference_checkpoint.generation, state.step
            )
        } else {
            format!("step {} W{}", state.step, state.workers)
        };
        let (fill, stroke) = if checkpoint {
            (GOOD_FILL, GOOD)
        } else {
            (PANEL, EDGE)
        };
        svg.rect(x, y0 + 16.0, 130.0, 28.0, fill, Some(stroke));
        svg.text(x + 8.0, y0 + 35.0, 12.0, INK, &label);
        x += 150.0;
    }
    svg.text(x, y0 + 35.0, 12.0, MUTED, "(green: evaluated checkpoint)");
}

/// Lineage, one run's crash-store row: the valid generations (recovery's selection
/// marked), the reshard, the continuation, and the killed candidate when not installed.
fn lineage_crash_row(svg: &mut Svg, e: &RecoveryEvidenceRecord, y0: f32) {
    svg.text(30.0, y0 + 94.0, 12.0, MUTED, "crash store");
    let selected = e.recovery.selected_generation;
    let mut boxes: Vec<(String, &str, &str, bool)> = Vec::new();
    for generation in &e.recovery.valid_generations {
        let chosen = *generation == selected;
        boxes.push((
            format!("gen {generation}{}", if chosen { " selected" } else { "" }),
            if chosen { NOTE_FILL } else { PANEL },
            if chosen { NOTE } else { EDGE },
            false,
        ));
    }
    boxes.push((
        format!(
            "gen {} reshard W{}",
            e.reshard.generation, e.reshard.workers_after
        ),
        PANEL,
        EDGE,
        false,
    ));
    boxes.push((
        format!(
            "gen {} step {} W{}",
            e.final_checkpoint.generation, e.final_checkpoint.step, e.final_checkpoint.workers
        ),
        GOOD_FILL,
        GOOD,
        false,
    ));
    let mut x = 160.0;
    for (i, (label, fill, stroke, _)) in boxes.iter().enumerate() {
        svg.rect(x, y0 + 76.0, 140.0, 28.0, fill, Some(stroke));
        svg.text(x + 8.0, y0 + 95.0, 12.0, INK, label);
        if i + 1 < boxes.len() {
            svg.arrow(x + 140.0, y0 + 90.0, x + 155.0, y0 + 90.0, MUTED);
        }
        x += 155.0;
    }
    if !e.kill.candidate_installed {
        let cx = 160.0 + 155.0 * (e.recovery.valid_generations.len().max(1) - 1) as f32;
        svg.line(cx + 70.0, y0 + 104.0, cx + 70.0, y0 + 150.0, BAD, true);
        svg.rect(cx + 80.0, y0 + 136.0, 330.0, 28.0, BAD_FILL, Some(BAD));
        svg.text(
            cx + 88.0,
            y0 + 155.0,
            12.0,
            INK,
            &format!(
                "candidate gen {}: not in commits/ (killed)",
                e.kill.candidate_generation
            ),
        );
    }
    svg.text(
        160.0,
        y0 + 190.0,
        12.0,
        MUTED,
        &format!(
            "recovery selected gen {} (step {}); resharded gen {} -> gen {}; continued to gen {}",
            selected,
            e.recovery.selected_step,
            e.reshard.source_generation,
            e.reshard.generation,
            e.final_checkpoint.generation
        ),
    );
}

fn equal_mark(equal: bool) -> (&'static str, &'static str) {
    if equal {
        ("equal (as recorded)", GOOD)
    } else {
        ("NOT equal (as recorded)", BAD)
    }
}

/// View 6.
pub fn projection(evidence: &Evidence) -> Svg {
    let mut svg = page(
        evidence,
        620.0,
        "Bounded projection: roots and logit probe",
        "Logical-state roots and logit-probe digests as the bundles record them; equality as the audit states it.",
    );
    for (row, run) in evidence.runs.iter().enumerate() {
        let e = &run.evidence;
        let y0 = 95.0 + row as f32 * 240.0;
        svg.text(30.0, y0, 15.0, NOTE, &format!("killed at {}", run.barrier));
        let target = e.reference.iter().find(|s| s.step == e.target_step);
        let rows = [
            (
                format!("reference W4 step {}", e.target_step),
                target
                    .map(|s| short(&s.logical_state_root))
                    .unwrap_or_else(|| "not recorded".into()),
            ),
            (
                format!(
                    "recovered W{} step {}",
                    e.recovered_w4.workers, e.recovered_w4.step
                ),
                short(&e.recovered_w4.logical_state_root),
            ),
            (
                format!(
                    "resharded W{} step {}",
                    e.resharded_w3.workers, e.resharded_w3.step
                ),
                short(&e.resharded_w3.logical_state_root),
            ),
            (
                format!(
                    "reshard source gen {}, from chunks",
                    e.reshard.source_generation
                ),
                short(&e.reshard.source_root_from_chunks),
            ),
            (
                format!("resharded gen {}, from chunks", e.reshard.generation),
                short(&e.reshard.resharded_root_from_chunks),
            ),
            (
                "logit probe, reference".to_owned(),
                short(&run.reference.logit_probe_sha256),
            ),
            (
                "logit probe, recovered".to_owned(),
                short(&run.recovered.logit_probe_sha256),
            ),
        ];
        for (i, (label, value)) in rows.iter().enumerate() {
            let y = y0 + 12.0 + 22.0 * i as f32;
            svg.text(30.0, y + 15.0, 12.0, MUTED, label);
            svg.text(300.0, y + 15.0, 12.0, INK, value);
        }
        let c = &run.audit.comparisons;
        let (roots, roots_color) = equal_mark(c.logical_state_roots_equal);
        let (probe, probe_color) = equal_mark(c.logit_probe_equal);
        svg.rect(520.0, y0 + 14.0, 410.0, 60.0, PANEL, Some(roots_color));
        svg.text(532.0, y0 + 38.0, 13.0, INK, "logical_state_roots_equal");
        svg.text(532.0, y0 + 60.0, 13.0, roots_color, roots);
        svg.rect(520.0, y0 + 86.0, 410.0, 60.0, PANEL, Some(probe_color));
        svg.text(532.0, y0 + 110.0, 13.0, INK, "logit_probe_equal");
        svg.text(532.0, y0 + 132.0, 13.0, probe_color, probe);
    }
    svg
}

/// View 7.
pub fn ledger(evidence: &Evidence) -> Svg {
    let mut svg = page(
        evidence,
        580.0,
        "Ledger continuity: trace digests per path",
        "Ledger-digest prefixes of the baseline, recovered and continued paths, with committed and replayed batch counts.",
    );
    for (row, run) in evidence.runs.iter().enumerate() {
        let e = &run.evidence;
        let y0 = 95.0 + row as f32 * 220.0;
        svg.text(30.0, y0, 15.0, NOTE, &format!("killed at {}", run.barrier));
        let mut x = 30.0;
        for state in &e.reference {
            svg.card(
                x,
                y0 + 12.0,
                200.0,
                (PANEL, EDGE),
                &format!("baseline step {}", state.step),
                &[short(&state.ledger_digest)],
            );
            x += 215.0;
        }
        let (fill, stroke) = if e.recovered_w4.ledger_digest == e.resharded_w3.ledger_digest {
            (GOOD_FILL, GOOD)
        } else {
            (BAD_FILL, BAD)
        };
        svg.card(
            30.0,
            y0 + 76.0,
            260.0,
            (fill, stroke),
            &format!("recovered W4 step {}", e.recovered_w4.step),
            &[short(&e.recovered_w4.ledger_digest)],
        );
        svg.card(
            305.0,
            y0 + 76.0,
            260.0,
            (fill, stroke),
            &format!("continued W3 step {}", e.resharded_w3.step),
            &[short(&e.resharded_w3.ledger_digest)],
        );
        let lines = [
            format!(
                "committed before the kill: through step {}",
                e.recovery.selected_step
            ),
            format!("replayed batches: {}", e.replayed_batches),
            format!(
                "ledger_digests_equal: {}",
                run.audit.comparisons.ledger_digests_equal
            ),
        ];
        for (i, line) in lines.iter().enumerate() {
            svg.text(585.0, y0 + 94.0 + 17.0 * i as f32, 12.0, INK, line);
        }
    }
    svg
}

/// View 8.
pub fn topology(evidence: &Evidence) -> Svg {
    let mut svg = page(
        evidence,
        720.0,
        "Topology: the process tree of each run",
        "Orchestrator, five coordinator sessions with their reaped workers, the publisher and recovery children, as recorded.",
    );
    for (column, run) in evidence.runs.iter().enumerate() {
        let e = &run.evidence;
        let x = column_x(column);
        svg.text(x, 92.0, 15.0, NOTE, &format!("killed at {}", run.barrier));
        svg.rect(x, 104.0, 435.0, 30.0, PANEL, Some(INK));
        svg.text(
            x + 10.0,
            124.0,
            13.0,
            INK,
            &format!(
                "orchestrator ({} worker exits recorded)",
                e.worker_exits.len()
            ),
        );
        let mut y = session_boxes(&mut svg, e, x);
        svg.line(x + 14.0, y - 16.0, x + 14.0, y + 15.0, MUTED, false);
        svg.card(
            x + 28.0,
            y,
            407.0,
            (BAD_FILL, BAD),
            "publisher child",
            &[format!(
                "signal {} at {}, reaped: {}",
                e.kill.signal,
                e.kill.target_barrier,
                yes(e.kill.reaped)
            )],
        );
        y += 56.0;
        svg.line(x + 14.0, y - 16.0, x + 14.0, y + 15.0, MUTED, false);
        svg.card(
            x + 28.0,
            y,
            407.0,
            (NOTE_FILL, NOTE),
            "recovery child (fresh process)",
            &[format!(
                "selected generation {} (step {})",
                e.recovery.selected_generation, e.recovery.selected_step
            )],
        );
    }
    svg
}

/// View 8's coordinator sessions of one run, each with its workers' recorded exits,
/// from the top of column `x` down; returns where the next box starts.
fn session_boxes(svg: &mut Svg, e: &RecoveryEvidenceRecord, x: f32) -> f32 {
    let mut y = 150.0;
    for session in &e.sessions {
        svg.line(x + 14.0, y - 16.0, x + 14.0, y + 15.0, MUTED, false);
        svg.rect(x + 28.0, y, 407.0, 58.0, PANEL, Some(EDGE));
        svg.text(
            x + 38.0,
            y + 18.0,
            12.0,
            INK,
            &format!(
                "session {} W{} steps {}..{}",
                session.name, session.workers, session.start_step, session.end_step
            ),
        );
        let mut wx = x + 38.0;
        for exit in e.worker_exits.iter().filter(|w| w.session == session.name) {
            let clean = exit.outcome == shardlift::evidence::bundle::CLEAN_WORKER_EXIT;
            let (fill, stroke) = if clean {
                (GOOD_FILL, GOOD)
            } else {
                (BAD_FILL, BAD)
            };
            svg.rect(wx, y + 26.0, 92.0, 24.0, fill, Some(stroke));
            svg.text(
                wx + 6.0,
                y + 42.0,
                11.0,
                INK,
                &format!("r{} {}", exit.rank, exit.outcome),
            );
            wx += 97.0;
        }
        y += 66.0;
    }
    y
}
