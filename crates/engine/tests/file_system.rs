//! The filesystem suite, run on [`LocalFileSystem`] and on a connection's [`FileHandles`].
//!
//! The scenarios (`tether_testkit::suites::fs`) take the implementation under test as an
//! argument; the client's tests run the same ones on Tether and on the reference.

use tether_engine::fs::{FileHandles, LocalFileSystem};
use tether_testkit::scenarios;
use tether_testkit::suites::fs as shared;

scenarios!(shared, on local, |scenario| {
    scenario(&LocalFileSystem::new()).await
}, [
    read_file_returns_whole_regular_files,
    read_file_refuses_anything_but_a_regular_file_promptly,
    read_file_is_capped_at_512_mib,
    read_file_reports_missing_and_foreign_paths,
    write_file_creates_or_truncates_in_place,
    write_file_reports_bad_targets_and_bad_base64,
    follow_symlinks_false_never_goes_through_a_link,
    create_directory_is_recursive_by_default,
    get_metadata_follows_links_but_says_it_was_one,
    get_metadata_times_are_the_references,
    canonicalize_resolves_every_link,
    read_directory_lists_in_readdir_order_following_links,
    read_directory_refuses_more_than_50000_entries,
    walk_is_breadth_first_and_sorted_per_directory,
    walk_bounds_set_truncated,
    walk_limits_are_validated_with_the_references_messages,
    walk_follows_directory_links_only_when_asked_and_once,
    walk_roots_that_are_not_directories,
    walk_reports_non_utf8_names_as_errors,
    remove_is_recursive_and_forced_by_default,
    remove_removes_links_not_their_targets,
    copy_copies_files_and_trees_with_links_as_links,
    copy_refuses_what_it_cannot_copy,
    copy_onto_itself_keeps_the_file,
    read_only_sandboxes_serve_reads_and_refuse_every_write,
    read_file_stream_yields_the_file_in_blocks_of_at_most_1_mib,
    read_file_stream_refuses_what_is_not_a_regular_file_promptly,
    read_file_stream_keeps_reading_the_file_it_opened,
    finished_streams_give_their_handles_back,
    write_file_stream_writes_blocks_in_order,
    write_file_stream_reports_a_missing_directory_as_not_found,
    rename_replaces_files_and_moves_trees,
    set_metadata_sets_the_mode_and_time_of_the_path_itself,
    create_symlink_and_read_link_round_trip,
    get_metadata_gives_the_mode_only_when_asked,
    read_only_sandboxes_refuse_the_new_writes,
    put_file_puts_a_whole_file_in_place_with_its_mode_and_time,
    read_directory_with_metadata_gives_each_entrys_own,
]);

scenarios!(shared, on local, |scenario| {
    scenario(&mut FileHandles::new()).await
}, [
    read_blocks_are_eof_only_when_short,
    write_blocks_fill_gaps_and_stay_within_signed_offsets,
    handle_ids_are_bounded_unique_and_limited_per_connection,
    closed_and_unknown_handles_are_not_found_and_close_is_idempotent,
    a_handle_keeps_reading_its_file_after_the_path_is_replaced,
    handles_are_used_only_as_they_were_opened,
    open_refuses_anything_but_a_regular_file_promptly,
]);
