//! The filesystem suite, run on [`LocalFileSystem`] and on a connection's [`FileHandles`].
//!
//! The scenarios (`tether_testkit::suites::fs`) take the implementation under test as an
//! argument; the client's tests run the same ones on Tether and on the reference.

use tether_engine::fs::{FileHandles, LocalFileSystem};
use tether_testkit::scenarios;
use tether_testkit::suites::fs as shared;

scenarios!(shared::every_file_system_scenario, on local, |scenario| {
    scenario(&LocalFileSystem::new()).await
});

scenarios!(shared::every_handles_scenario, on local, |scenario| {
    scenario(&mut FileHandles::new()).await
});
