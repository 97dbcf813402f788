//! Whole-file reads (`fs/readFile`) under one server-wide budget of bytes in flight.
//!
//! A whole-file read holds the file in memory, then its base64 answer until that is written:
//! unbounded, a few dozen concurrent reads of large files (or of `/proc` files that never end)
//! would exhaust the machine for every session. Each read takes its share of the budget before
//! it holds the bytes — the file's size, and more as it turns out to be longer (a `/proc` file
//! says 0, a file may grow) — and gives it back when its grant is dropped, after the answer
//! was written. A read that finds the budget taken waits its turn.

use std::fs::File;
use std::io::{self, Read};
use std::sync::Arc;

use tether_protocol::fs::FS_READ_FILE_MAX_BYTES;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::FsError;
use super::blocking::blocking;

/// What a read takes beyond what it has when a file turns out longer than it said: small
/// steps, so that a file that lied about its size holds little more than it has.
const GROWTH_STEP_BYTES: u32 = 1024 * 1024;

/// A read's share of the budget; returned when dropped.
#[derive(Debug)]
pub struct ReadGrant(OwnedSemaphorePermit);

impl ReadGrant {
    /// The permit itself, to be held by whatever holds the answer.
    pub fn into_permit(self) -> OwnedSemaphorePermit {
        self.0
    }
}

/// The bytes whole-file reads may hold at once.
#[derive(Debug, Clone)]
pub(crate) struct WholeReadBudget {
    bytes: Arc<Semaphore>,
    /// What the budget was made with: a read can never take more.
    total: u32,
}

impl WholeReadBudget {
    /// A budget of `bytes` (at most what a semaphore counts). Below the largest file a read
    /// takes, files too big for it are refused with a message that says so.
    pub(crate) fn new(bytes: usize) -> Self {
        let total = bytes.clamp(1, u32::MAX as usize) as u32;
        Self { bytes: Arc::new(Semaphore::new(total as usize)), total }
    }

    /// Reads all of `file`, at most [`FS_READ_FILE_MAX_BYTES`], holding its bytes' share of
    /// the budget, which the grant goes on holding.
    pub(crate) async fn read(&self, file: File) -> Result<(Vec<u8>, ReadGrant), FsError> {
        let file = Arc::new(file);
        let size = {
            let file = file.clone();
            blocking(move || file.metadata()).await?.len()
        };
        if size > FS_READ_FILE_MAX_BYTES {
            return Err(too_large().into());
        }
        // One byte more than the size says, to see the end of the file within the share.
        let first = size as u32 + 1;
        if first > self.total {
            return Err(self.over_budget());
        }
        let mut grant = self.take(first).await?;
        let mut bytes: Vec<u8> = Vec::new();
        loop {
            let room = grant.num_permits() - bytes.len();
            let reading = file.clone();
            let (read, filled) = blocking(move || {
                let before = bytes.len();
                (&*reading).take(room as u64).read_to_end(&mut bytes)?;
                let read = bytes.len() - before;
                Ok((read, bytes))
            })
            .await?;
            bytes = filled;
            if read < room {
                return Ok((bytes, ReadGrant(grant)));
            }
            if bytes.len() as u64 > FS_READ_FILE_MAX_BYTES {
                return Err(too_large().into());
            }
            let more = GROWTH_STEP_BYTES.min(self.total - grant.num_permits() as u32);
            if more == 0 {
                return Err(self.over_budget());
            }
            grant.merge(self.take(more).await?);
        }
    }

    fn over_budget(&self) -> FsError {
        FsError::invalid_input(format!(
            "file is too large to read whole on this server: whole-file reads may hold {} bytes at once (--file-read-budget-bytes); read it in blocks with fs/open and fs/readBlock",
            self.total
        ))
    }

    async fn take(&self, bytes: u32) -> Result<OwnedSemaphorePermit, FsError> {
        self.bytes
            .clone()
            .acquire_many_owned(bytes)
            .await
            .map_err(|_| FsError::other("the file-read budget is closed"))
    }
}

fn too_large() -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("file is too large to read: limit is {FS_READ_FILE_MAX_BYTES} bytes"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_read_holds_its_share_until_its_grant_goes() {
        let dir = std::env::temp_dir().join(format!("tether-whole-read-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("file");
        std::fs::write(&path, vec![7u8; 3000]).unwrap();
        let budget = WholeReadBudget::new(64 * 1024 * 1024);
        let free = budget.bytes.available_permits();
        let (bytes, grant) = budget.read(File::open(&path).unwrap()).await.unwrap();
        assert_eq!(bytes, vec![7u8; 3000]);
        assert_eq!(budget.bytes.available_permits(), free - 3001);
        drop(grant);
        assert_eq!(budget.bytes.available_permits(), free);
        // A file that says it is empty and is not (as `/proc` files do) takes more as it goes.
        let (bytes, grant) = budget.read(File::open("/proc/self/maps").unwrap()).await.unwrap();
        assert!(!bytes.is_empty());
        assert!(grant.0.num_permits() > bytes.len());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
