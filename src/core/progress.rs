//! Progress of a long operation, as the library reports it: a named phase with a known or
//! unknown number of steps, then how many steps are done. The library never draws; the
//! binary decides how (a bar on a terminal, phase lines otherwise), so the library holds
//! no terminal code.

/// Receives progress reports. Every method has a do-nothing default.
pub trait Progress {
    /// A phase begins: `name` says what it does, `total` how many steps it has when known.
    fn phase(&mut self, name: &str, total: Option<u64>) {
        let _ = (name, total);
    }

    /// `done` steps of the current phase are complete (a running count, not a delta).
    fn advance(&mut self, done: u64) {
        let _ = done;
    }

    /// The current phase is over.
    fn finish(&mut self) {}
}

/// Reports nowhere.
pub struct NoProgress;

impl Progress for NoProgress {}

/// Records every report, for tests: `phase NAME TOTAL`, `advance N`, `finish`.
#[derive(Default, Debug)]
pub struct RecordedProgress {
    /// The reports, in order.
    pub events: Vec<String>,
}

impl Progress for RecordedProgress {
    fn phase(&mut self, name: &str, total: Option<u64>) {
        self.events.push(match total {
            Some(total) => format!("phase {name} {total}"),
            None => format!("phase {name} ?"),
        });
    }

    fn advance(&mut self, done: u64) {
        self.events.push(format!("advance {done}"));
    }

    fn finish(&mut self) {
        self.events.push("finish".to_owned());
    }
}
