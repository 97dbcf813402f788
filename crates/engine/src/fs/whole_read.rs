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

/// Where the first, blocking, step of a read left it.
enum First {
    /// Read whole within its share.
    Done(Vec<u8>, OwnedSemaphorePermit),
    /// Longer than it said: read so far, with the share taken.
    Longer(File, Vec<u8>, OwnedSemaphorePermit),
    /// The budget had no room: opened, waiting for this share, the head kept.
    Wait(File, Vec<u8>, u32),
    /// Bigger than the whole budget.
    OverBudget,
}

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

    /// Opens a file with `open` and reads all of it onto the end of `head`, at most
    /// [`FS_READ_FILE_MAX_BYTES`], holding its bytes' share of the budget, which the grant goes
    /// on holding. `head` is what the answer puts before the file (its JSON, for a binary
    /// message): a large file is then read straight into its answer, not copied there after.
    ///
    /// The usual read — the budget has room, the file is as long as it says — is one trip to
    /// the blocking pool, as a read without a budget is: a thousand small reads in a row must
    /// not pay for the budget. Otherwise the read waits for its share, and takes more in
    /// [`GROWTH_STEP_BYTES`] steps while the file goes on.
    pub(crate) async fn read(
        &self,
        open: impl FnOnce() -> io::Result<File> + Send + 'static,
        head: Vec<u8>,
    ) -> Result<(Vec<u8>, ReadGrant), FsError> {
        let (budget, total) = (self.bytes.clone(), self.total);
        let start = head.len();
        let first = blocking(move || {
            let file = open()?;
            let size = file.metadata()?.len();
            if size > FS_READ_FILE_MAX_BYTES {
                return Err(too_large());
            }
            // One byte more than the size says, to see the end of the file within the share.
            let want = size as u32 + 1;
            if want > total {
                return Ok(First::OverBudget);
            }
            let Ok(grant) = budget.try_acquire_many_owned(want) else {
                return Ok(First::Wait(file, head, want));
            };
            let mut bytes = head;
            bytes.reserve_exact(size as usize);
            (&file).take(u64::from(want)).read_to_end(&mut bytes)?;
            Ok(match bytes.len() - start < want as usize {
                true => First::Done(bytes, grant),
                false => First::Longer(file, bytes, grant),
            })
        })
        .await?;
        let (file, bytes, grant) = match first {
            First::Done(bytes, grant) => return Ok((bytes, ReadGrant(grant))),
            First::OverBudget => return Err(self.over_budget()),
            First::Wait(file, head, want) => (file, head, self.take(want).await?),
            First::Longer(file, bytes, grant) => (file, bytes, grant),
        };
        self.read_on(Arc::new(file), bytes, start, grant).await
    }

    /// The rest of a read that had to wait, or found the file longer than it said: the file's
    /// bytes are those of `bytes` from `start` on.
    async fn read_on(
        &self,
        file: Arc<File>,
        mut bytes: Vec<u8>,
        start: usize,
        mut grant: OwnedSemaphorePermit,
    ) -> Result<(Vec<u8>, ReadGrant), FsError> {
        loop {
            let read_so_far = bytes.len() - start;
            if read_so_far as u64 > FS_READ_FILE_MAX_BYTES {
                return Err(too_large().into());
            }
            if read_so_far == grant.num_permits() {
                let more = GROWTH_STEP_BYTES.min(self.total - grant.num_permits() as u32);
                if more == 0 {
                    return Err(self.over_budget());
                }
                grant.merge(self.take(more).await?);
            }
            let room = grant.num_permits() - read_so_far;
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
        }
    }

    /// `bytes` of the budget now, if it has them (and they are not past what a read may
    /// take): for a read that would rather go the usual way than wait.
    pub(crate) fn try_grant(&self, bytes: u64) -> Option<ReadGrant> {
        let bytes = u32::try_from(bytes).ok().filter(|bytes| *bytes <= self.total)?;
        self.bytes.clone().try_acquire_many_owned(bytes).ok().map(ReadGrant)
    }

    async fn take(&self, bytes: u32) -> Result<OwnedSemaphorePermit, FsError> {
        self.bytes
            .clone()
            .acquire_many_owned(bytes)
            .await
            .map_err(|_| FsError::other("the file-read budget is closed"))
    }

    fn over_budget(&self) -> FsError {
        FsError::invalid_input(format!(
            "file is too large to read whole on this server: whole-file reads may hold {} bytes at once (--file-read-budget-bytes); read it in blocks with fs/open and fs/readBlock",
            self.total
        ))
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
        let opened = path.clone();
        let (bytes, grant) = budget.read(move || File::open(opened), Vec::new()).await.unwrap();
        assert_eq!(bytes, vec![7u8; 3000]);
        assert_eq!(budget.bytes.available_permits(), free - 3001);
        drop(grant);
        assert_eq!(budget.bytes.available_permits(), free);
        // A file that says it is empty and is not (as `/proc` files do) takes more as it goes.
        let (bytes, grant) =
            budget.read(|| File::open("/proc/self/maps"), Vec::new()).await.unwrap();
        assert!(!bytes.is_empty());
        assert!(grant.0.num_permits() > bytes.len());
        drop(grant);

        // After a head, the file's bytes alone count against the budget: a file as long as it
        // says, and one longer than it says.
        let opened = path.clone();
        let (bytes, grant) =
            budget.read(move || File::open(opened), b"head".to_vec()).await.unwrap();
        assert_eq!((&bytes[..4], &bytes[4..]), (&b"head"[..], &vec![7u8; 3000][..]));
        assert_eq!(grant.0.num_permits(), 3001);
        drop(grant);
        let maps = || File::open("/proc/self/maps");
        let (bytes, grant) = budget.read(maps, b"head".to_vec()).await.unwrap();
        assert!(bytes.starts_with(b"head") && bytes.len() > 4);
        assert!(grant.0.num_permits() > bytes.len() - 4);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
