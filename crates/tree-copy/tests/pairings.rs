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

    scenarios!(tree_copy, on [tether, reference], |target, scenario| {
        let server = ServerProcess::start(target).await.unwrap();
        scenario(&LocalFileSystem::new(), &connected(&server.url).await).await
    }, [
        a_tree_arrives_with_every_byte,
        a_file_goes_into_a_directory_or_onto_a_name,
        mistakes_are_refused_by_kind,
        a_link_where_a_directory_goes_stops_the_copy,
        a_fifo_in_a_tree_is_skipped_and_counted,
        a_reader_becomes_a_file_and_a_file_a_writer,
        an_abandoned_copy_leaves_nothing_once_its_stages_are_removed,
    ]);

    scenarios!(
        tree_copy,
        on[tether],
        |target, scenario| {
            let server = ServerProcess::start(target).await.unwrap();
            scenario(&LocalFileSystem::new(), &connected(&server.url).await).await
        },
        [modes_times_and_links_are_kept]
    );
}

mod down {
    use super::*;

    scenarios!(tree_copy, on [tether, reference], |target, scenario| {
        let server = ServerProcess::start(target).await.unwrap();
        scenario(&connected(&server.url).await, &LocalFileSystem::new()).await
    }, [
        a_tree_arrives_with_every_byte,
        a_file_goes_into_a_directory_or_onto_a_name,
        mistakes_are_refused_by_kind,
        a_link_where_a_directory_goes_stops_the_copy,
        a_fifo_in_a_tree_is_skipped_and_counted,
        a_reader_becomes_a_file_and_a_file_a_writer,
        an_abandoned_copy_leaves_nothing_once_its_stages_are_removed,
    ]);

    scenarios!(
        tree_copy,
        on[tether],
        |target, scenario| {
            let server = ServerProcess::start(target).await.unwrap();
            scenario(&connected(&server.url).await, &LocalFileSystem::new()).await
        },
        [modes_times_and_links_are_kept]
    );
}

mod across {
    use super::*;

    scenarios!(tree_copy, on [tether, reference], |target, scenario| {
        let (one, other) = (ServerProcess::start(target).await.unwrap(), ServerProcess::start(target).await.unwrap());
        scenario(&connected(&one.url).await, &connected(&other.url).await).await
    }, [
        a_tree_arrives_with_every_byte,
        a_file_goes_into_a_directory_or_onto_a_name,
        mistakes_are_refused_by_kind,
        a_link_where_a_directory_goes_stops_the_copy,
        a_fifo_in_a_tree_is_skipped_and_counted,
        a_reader_becomes_a_file_and_a_file_a_writer,
        an_abandoned_copy_leaves_nothing_once_its_stages_are_removed,
    ]);

    scenarios!(
        tree_copy,
        on[tether],
        |target, scenario| {
            let (one, other) = (
                ServerProcess::start(target).await.unwrap(),
                ServerProcess::start(target).await.unwrap(),
            );
            scenario(&connected(&one.url).await, &connected(&other.url).await).await
        },
        [modes_times_and_links_are_kept]
    );
}

mod here {
    use super::*;

    scenarios!(tree_copy, on local, |scenario| {
        scenario(&LocalFileSystem::new(), &LocalFileSystem::new()).await
    }, [
        a_tree_arrives_with_every_byte,
        modes_times_and_links_are_kept,
        a_file_goes_into_a_directory_or_onto_a_name,
        mistakes_are_refused_by_kind,
        a_link_where_a_directory_goes_stops_the_copy,
        a_fifo_in_a_tree_is_skipped_and_counted,
        a_reader_becomes_a_file_and_a_file_a_writer,
        an_abandoned_copy_leaves_nothing_once_its_stages_are_removed,
    ]);
}
