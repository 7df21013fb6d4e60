//! Lines from a child's pipe, each read with a deadline and a length cap.
use super::*;

/// Reads newline-terminated lines from a child's pipe with a deadline.
pub(super) struct LineReader<R: Read + AsFd> {
    source: R,
    buffer: Vec<u8>,
    eof: bool,
}

impl<R: Read + AsFd> LineReader<R> {
    pub(super) fn new(source: R) -> Self {
        LineReader {
            source,
            buffer: Vec::new(),
            eof: false,
        }
    }

    fn wait_readable(&self, deadline: Instant) -> Result<(), LabError> {
        loop {
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                return Err(LabError::ChildProtocol(
                    "timed out waiting for the child".into(),
                ));
            }
            let timespec = Timespec {
                tv_sec: remaining.as_secs() as i64,
                tv_nsec: i64::from(remaining.subsec_nanos()),
            };
            let mut fds = [PollFd::new(&self.source, PollFlags::IN)];
            match poll(&mut fds, Some(&timespec)) {
                Ok(0) => continue,
                Ok(_) => return Ok(()),
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(LabError::ChildProtocol(format!("poll: {e}"))),
            }
        }
    }

    fn fill(&mut self, deadline: Instant) -> Result<(), LabError> {
        self.wait_readable(deadline)?;
        let mut chunk = [0u8; 8192];
        let n = self
            .source
            .read(&mut chunk)
            .map_err(|e| LabError::ChildProtocol(format!("read: {e}")))?;
        if n == 0 {
            self.eof = true;
        }
        self.buffer.extend_from_slice(&chunk[..n]);
        Ok(())
    }

    /// The next line (without the newline), or `None` at EOF.
    pub(super) fn next_line(&mut self, deadline: Instant) -> Result<Option<String>, LabError> {
        loop {
            if let Some(pos) = self.buffer.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.buffer.drain(..=pos).collect();
                let text = String::from_utf8(line[..pos].to_vec())
                    .map_err(|_| LabError::ChildProtocol("non-UTF-8 line".into()))?;
                return Ok(Some(text));
            }
            if self.buffer.len() > MAX_LINE_BYTES {
                return Err(LabError::ChildProtocol("line exceeds the cap".into()));
            }
            if self.eof {
                return Ok(None);
            }
            self.fill(deadline)?;
        }
    }

    /// Everything until EOF (capped).
    pub(super) fn read_to_end(
        &mut self,
        deadline: Instant,
        cap: usize,
    ) -> Result<Vec<u8>, LabError> {
        while !self.eof {
            if self.buffer.len() > cap {
                return Err(LabError::ChildProtocol("output exceeds the cap".into()));
            }
            self.fill(deadline)?;
        }
        Ok(std::mem::take(&mut self.buffer))
    }
}
