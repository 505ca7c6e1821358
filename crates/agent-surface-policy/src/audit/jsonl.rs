//! [`JsonLinesAuditSink`]: the audit trail as a JSON Lines file.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use futures_util::future::BoxFuture;

use super::{AuditError, AuditEvent, AuditSink};

/// How much of the file's end [`AuditSink::recent`] reads: enough for a few thousand events.
const TAIL_BYTES: u64 = 1024 * 1024;

/// An [`AuditSink`] that appends one JSON object per line to a file and syncs it to disk
/// (`fdatasync`) before `record` returns, so a recorded event survives a crash of the process or
/// the machine.
///
/// **No torn lines.** Each event is written with one write of its whole line. When a write or
/// the sync fails, the file is cut back to its length before the write (a line that was not
/// acknowledged is never left behind; if even that fails, the sink refuses every later record
/// until it is opened again). A crash in the middle of a write can still leave a partial last
/// line; [`open`](Self::open) cuts it, so every line of the file is a whole event.
///
/// One sink per file: two sinks (or processes) appending to the same file may each cut the
/// other's line. Rotate the file by renaming it and opening a new sink (the old handle keeps
/// writing to the renamed file until then).
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// use agent_surface_core::{Effect, Timestamp};
/// use agent_surface_policy::{AuditEvent, AuditKind, AuditSink, JsonLinesAuditSink};
///
/// let dir = std::env::temp_dir().join(format!("audit-doc-{}", std::process::id()));
/// std::fs::create_dir_all(&dir).unwrap();
/// let path = dir.join("audit.jsonl");
/// # let _ = std::fs::remove_file(&path);
/// let sink = JsonLinesAuditSink::open(&path).unwrap();
/// let started = AuditKind::ExecutionStarted { effect: Effect::Write };
/// sink.record(&AuditEvent::new(Timestamp::from_unix_millis(0), started, "orders.cancel", "s-1")).await.unwrap();
/// let text = std::fs::read_to_string(&path).unwrap();
/// assert!(text.starts_with(r#"{"at":"1970-01-01T00:00:00.000Z","event":"execution.started""#));
/// assert!(text.ends_with("}\n"));
/// # });
/// ```
#[derive(Debug, Clone)]
pub struct JsonLinesAuditSink {
    path: Arc<Path>,
    file: Arc<Mutex<Appender>>,
}

#[derive(Debug)]
struct Appender {
    file: File,
    /// Why the file can no longer be trusted to hold whole lines (a failed write could not be
    /// undone); every record fails until the sink is opened again.
    broken: Option<String>,
}

impl JsonLinesAuditSink {
    /// Opens (or creates) the file at `path` for appending, cutting a partial last line a crash
    /// may have left (a warning on the operator channel, kept until a log exists when none
    /// records it yet: [`wiring`](crate::wiring)).
    pub fn open(path: impl Into<PathBuf>) -> io::Result<JsonLinesAuditSink> {
        let path: PathBuf = path.into();
        let mut file = OpenOptions::new().create(true).read(true).append(true).open(&path)?;
        let cut = cut_torn_tail(&mut file)?;
        if cut > 0 {
            // Said at open, which is usually before any log exists: kept for the log installed
            // later (`Serve` says it), as the stores' warnings at connect are.
            crate::wiring::warn(&format!(
                "the audit file {}: cut a partial last line of {cut} bytes (the event whose write \
                 was interrupted, never acknowledged)",
                path.display()
            ));
        }
        Ok(JsonLinesAuditSink { path: path.into(), file: Arc::new(Mutex::new(Appender { file, broken: None })) })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Runs `op` on the file on a thread that may block (a sync takes milliseconds).
    async fn blocking<T: Send + 'static>(
        &self,
        op: impl FnOnce(&mut Appender) -> Result<T, AuditError> + Send + 'static,
    ) -> Result<T, AuditError> {
        let file = Arc::clone(&self.file);
        let run = move || op(&mut file.lock().unwrap_or_else(PoisonError::into_inner));
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => handle.spawn_blocking(run).await.map_err(|e| AuditError::new(format!("audit write: {e}")))?,
            Err(_) => run(),
        }
    }
}

impl Appender {
    /// Appends `line` whole and syncs it, or leaves the file as it was.
    fn append(&mut self, line: &[u8]) -> Result<(), AuditError> {
        if let Some(why) = &self.broken {
            return Err(AuditError::new(format!("the audit file is unusable until reopened: {why}")));
        }
        let before = self.file.metadata().map_err(|e| AuditError::new(format!("audit file: {e}")))?.len();
        let Err(e) = self.file.write_all(line).and_then(|()| self.file.sync_data()) else { return Ok(()) };
        // Undo whatever part of the line reached the file, so the next line starts clean.
        if let Err(undo) = self.file.set_len(before).and_then(|()| self.file.sync_data()) {
            self.broken = Some(format!("a failed write ({e}) could not be undone ({undo})"));
        }
        Err(AuditError::new(format!("audit file write: {e}")))
    }

    /// Up to `limit` whole events from the last [`TAIL_BYTES`] of the file, oldest first.
    fn tail(&mut self, limit: usize) -> Result<Vec<AuditEvent>, AuditError> {
        let io = |e: io::Error| AuditError::new(format!("audit file read: {e}"));
        let len = self.file.metadata().map_err(io)?.len();
        let start = len.saturating_sub(TAIL_BYTES);
        self.file.seek(SeekFrom::Start(start)).map_err(io)?;
        let mut bytes = Vec::with_capacity(usize::try_from(len - start).unwrap_or(0));
        (&mut self.file).take(len - start).read_to_end(&mut bytes).map_err(io)?;
        let mut lines: Vec<&[u8]> = bytes.split(|b| *b == b'\n').collect();
        // The piece after the last newline is empty (or a line being written); the first piece is
        // cut when the read did not start at the beginning of the file.
        lines.pop();
        if start > 0 && !lines.is_empty() {
            lines.remove(0);
        }
        let skip = lines.len().saturating_sub(limit);
        Ok(lines[skip..].iter().filter_map(|line| serde_json::from_slice(line).ok()).collect())
    }
}

impl AuditSink for JsonLinesAuditSink {
    fn record<'a>(&'a self, event: &'a AuditEvent) -> BoxFuture<'a, Result<(), AuditError>> {
        let line = serde_json::to_vec(event).map(|mut line| {
            line.push(b'\n');
            line
        });
        Box::pin(async move {
            let line = line.map_err(|e| AuditError::new(format!("audit event does not serialize: {e}")))?;
            self.blocking(move |appender| appender.append(&line)).await
        })
    }

    fn recent<'a>(&'a self, limit: usize) -> BoxFuture<'a, Result<Vec<AuditEvent>, AuditError>> {
        Box::pin(self.blocking(move |appender| appender.tail(limit)))
    }
}

/// Cuts the file after its last newline (a partial line a crash left behind) and syncs; returns
/// how many bytes were cut.
fn cut_torn_tail(file: &mut File) -> io::Result<u64> {
    const CHUNK: u64 = 64 * 1024;
    let len = file.metadata()?.len();
    let mut end = len;
    let mut buf = vec![0u8; CHUNK as usize];
    // Scan backwards for the last newline.
    let keep = loop {
        if end == 0 {
            break 0;
        }
        let start = end.saturating_sub(CHUNK);
        let chunk = &mut buf[..usize::try_from(end - start).unwrap_or(0)];
        file.seek(SeekFrom::Start(start))?;
        file.read_exact(chunk)?;
        if let Some(at) = chunk.iter().rposition(|b| *b == b'\n') {
            break start + at as u64 + 1;
        }
        end = start;
    };
    if keep < len {
        file.set_len(keep)?;
        file.sync_data()?;
    }
    Ok(len - keep)
}
