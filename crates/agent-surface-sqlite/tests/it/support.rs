//! A folder of its own per test, removed when the test ends.

use std::path::{Path, PathBuf};

/// A fresh folder under the system's temporary folder.
pub(crate) struct Folder(PathBuf);

impl Folder {
    pub(crate) fn new(test: &str) -> Folder {
        let nonce = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let path = std::env::temp_dir().join(format!("agent-surface-sqlite-{test}-{}-{nonce}", std::process::id()));
        std::fs::create_dir_all(&path).expect("a temporary folder");
        Folder(path)
    }

    pub(crate) fn file(&self) -> PathBuf {
        self.0.join("store.db")
    }

    pub(crate) fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Folder {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
