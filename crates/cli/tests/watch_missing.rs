//! `fs/watchMissing` over the wire: a watch fires `fs/missingChanged` once when a missing path
//! (or a component of it) appears or the `present` path goes away; one watch per connection.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use tether_testkit::{RpcClient, ServerProcess, Target, against_both};

against_both!(
    a_watch_fires_once_when_a_missing_path_appears,
    a_watch_fires_when_present_is_removed,
    watching_is_refused_when_there_is_already_something_to_see,
    a_new_watch_replaces_the_previous_one,
);

fn scratch(target: Target, name: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("tether-wm-{name}-{target:?}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("present")).unwrap();
    dir
}

fn uri(path: &Path) -> String {
    format!("file://{}", path.display())
}

async fn started(target: Target) -> (ServerProcess, RpcClient) {
    let server = ServerProcess::start(target).await.unwrap();
    let (client, _) = RpcClient::connect_initialized(&server.url).await.unwrap();
    (server, client)
}

async fn watch(
    client: &mut RpcClient,
    id: u64,
    missing: &[&Path],
    present: Option<&Path>,
) -> Value {
    let mut params =
        json!({"watchId": id, "missing": missing.iter().map(|p| uri(p)).collect::<Vec<_>>()});
    if let Some(present) = present {
        params["present"] = json!(uri(present));
    }
    client.ok("fs/watchMissing", params).await.unwrap()
}

/// What `client` has been told by the time a change made after `change` has fired a watch of
/// another connection: a watch of `client`'s that fires on `change` has gone the same way
/// through the server, woken first, so it would be here.
async fn told_before_a_later_watch_fires(
    server: &ServerProcess,
    client: &mut RpcClient,
    dir: &Path,
    change: impl FnOnce(),
) -> Vec<Value> {
    let (mut other, _) = RpcClient::connect_initialized(&server.url).await.unwrap();
    let later = dir.join("later");
    assert_eq!(watch(&mut other, 1, &[&later], None).await, json!({"watching": true}));
    change();
    std::fs::create_dir(&later).unwrap();
    let fired = other.notification().await.unwrap();
    assert_eq!(fired, json!({"method": "fs/missingChanged", "params": {"watchId": 1}}));
    // Whatever the server sent `client` before this answer has arrived with it.
    client.ok("environment/status", json!(null)).await.unwrap();
    client.take_notifications()
}

async fn a_watch_fires_once_when_a_missing_path_appears(target: Target) {
    let dir = scratch(target, "appear");
    let (server, mut client) = started(target).await;
    let result = watch(&mut client, 1, &[&dir.join("d/e")], Some(&dir.join("present"))).await;
    assert_eq!(result, json!({"watching": true}));
    std::fs::create_dir(dir.join("d")).unwrap();
    let notification = client.notification().await.unwrap();
    assert_eq!(notification, json!({"method": "fs/missingChanged", "params": {"watchId": 1}}));
    // It fired; it is over.
    let create = || std::fs::create_dir(dir.join("d/e")).unwrap();
    let told = told_before_a_later_watch_fires(&server, &mut client, &dir, create).await;
    assert_eq!(told, [] as [Value; 0], "a watch fires once");
    let _ = std::fs::remove_dir_all(dir);
}

async fn a_watch_fires_when_present_is_removed(target: Target) {
    let dir = scratch(target, "present");
    let (_server, mut client) = started(target).await;
    let result = watch(&mut client, 9, &[&dir.join("never")], Some(&dir.join("present"))).await;
    assert_eq!(result, json!({"watching": true}));
    std::fs::remove_dir(dir.join("present")).unwrap();
    let notification = client.notification().await.unwrap();
    assert_eq!(notification, json!({"method": "fs/missingChanged", "params": {"watchId": 9}}));
    let _ = std::fs::remove_dir_all(dir);
}

async fn watching_is_refused_when_there_is_already_something_to_see(target: Target) {
    let dir = scratch(target, "refused");
    let (_server, mut client) = started(target).await;
    let exists = watch(&mut client, 1, &[&dir.join("present")], None).await;
    assert_eq!(exists, json!({"watching": false}), "a missing path exists");
    let gone = watch(&mut client, 2, &[&dir.join("x")], Some(&dir.join("gone"))).await;
    assert_eq!(gone, json!({"watching": false}), "present does not exist");
    let error =
        client.err("fs/watchMissing", json!({"watchId": "s", "missing": []})).await.unwrap();
    assert_eq!(
        (error.code, error.message.as_str()),
        (-32602, "invalid type: string \"s\", expected u64")
    );
    let _ = std::fs::remove_dir_all(dir);
}

async fn a_new_watch_replaces_the_previous_one(target: Target) {
    let dir = scratch(target, "replace");
    let (server, mut client) = started(target).await;
    assert_eq!(watch(&mut client, 1, &[&dir.join("a")], None).await, json!({"watching": true}));
    assert_eq!(watch(&mut client, 2, &[&dir.join("b")], None).await, json!({"watching": true}));
    let write = || std::fs::write(dir.join("a"), "").unwrap();
    let told = told_before_a_later_watch_fires(&server, &mut client, &dir, write).await;
    assert_eq!(told, [] as [Value; 0], "the replaced watch is over");
    std::fs::write(dir.join("b"), "").unwrap();
    let notification = client.notification().await.unwrap();
    assert_eq!(
        notification["params"]["watchId"], 2,
        "only the current watch fires: {notification}"
    );
    let _ = std::fs::remove_dir_all(dir);
}
