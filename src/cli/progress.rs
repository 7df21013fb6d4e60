//! Draws the library's progress reports ([`shardlift::core::progress::Progress`]) on
//! stderr: a bar (`indicatif`) when stderr is a terminal, otherwise one line per phase
//! (and its end), so logs stay short. Stdout is never touched.
use std::io::IsTerminal as _;
use std::time::Instant;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use shardlift::core::progress::Progress;

/// Progress on stderr.
pub struct StderrProgress {
    terminal: bool,
    bar: Option<ProgressBar>,
    phase: Option<(String, Instant)>,
}

impl StderrProgress {
    pub fn new() -> StderrProgress {
        StderrProgress {
            terminal: std::io::stderr().is_terminal(),
            bar: None,
            phase: None,
        }
    }
}

impl Progress for StderrProgress {
    fn phase(&mut self, name: &str, total: Option<u64>) {
        self.finish();
        self.phase = Some((name.to_owned(), Instant::now()));
        if !self.terminal {
            match total {
                Some(total) => eprintln!("{name}: {total} steps"),
                None => eprintln!("{name}"),
            }
            return;
        }
        let bar = match total {
            Some(total) => ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr())
                .with_style(
                    ProgressStyle::with_template(
                        "{msg} [{bar:40}] {pos}/{len} ({elapsed}, eta {eta})",
                    )
                    .unwrap_or_else(|_| ProgressStyle::default_bar())
                    .progress_chars("=> "),
                ),
            None => ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr()).with_style(
                ProgressStyle::with_template("{spinner} {msg} ({elapsed})")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            ),
        };
        bar.set_message(name.to_owned());
        bar.enable_steady_tick(std::time::Duration::from_millis(200));
        self.bar = Some(bar);
    }

    fn advance(&mut self, done: u64) {
        if let Some(bar) = &self.bar {
            bar.set_position(done);
        }
    }

    fn finish(&mut self) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
        if let Some((name, started)) = self.phase.take() {
            eprintln!("{name}: done in {:.1} s", started.elapsed().as_secs_f64());
        }
    }
}

impl Drop for StderrProgress {
    fn drop(&mut self) {
        if let Some(bar) = self.bar.take() {
            bar.abandon();
        }
    }
}
