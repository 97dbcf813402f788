//! The tree copy suite (`tether_testkit::suites::tree_copy`) in every pairing of sides: here
//! to an executor (`up`), an executor to here (`down`), one executor to another (`across`,
//! two servers of the same kind), each on Tether and on the reference; and here to here
//! (`here`, the engine on both sides). Modes, times and links are kept only where both sides
//! keep them, so that scenario runs on Tether and here alone.

use tether_client::{ClientOptions, ExecServerClient};
use tether_engine::fs::LocalFileSystem;
use tether_testkit::suites::tree_copy;
use tether_testkit::{ServerProcess, scenarios};

async fn connected(url: &str) -> ExecServerClient {
    ExecServerClient::connect(url, ClientOptions::default()).await.unwrap()
}

mod up {
    use super::*;

    scenarios!(tree_copy::every_scenario, on [tether, reference], |target, scenario| {
        let server = ServerProcess::start(target).await.unwrap();
        scenario(&LocalFileSystem::new(), &connected(&server.url).await).await
    });
}

mod down {
    use super::*;

    scenarios!(tree_copy::every_scenario, on [tether, reference], |target, scenario| {
        let server = ServerProcess::start(target).await.unwrap();
        scenario(&connected(&server.url).await, &LocalFileSystem::new()).await
    });
}

mod across {
    use super::*;

    scenarios!(tree_copy::every_scenario, on [tether, reference], |target, scenario| {
        let one = ServerProcess::start(target).await.unwrap();
        let other = ServerProcess::start(target).await.unwrap();
        scenario(&connected(&one.url).await, &connected(&other.url).await).await
    });
}

mod here {
    use super::*;

    scenarios!(tree_copy::every_scenario, on local, |scenario| {
        scenario(&LocalFileSystem::new(), &LocalFileSystem::new()).await
    });
}
