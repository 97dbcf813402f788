//! Limits that keep one client from taking a server from everyone else (Tether only: the
//! reference has none of these flags): each refusal names the limit and what to do.

use std::time::Duration;

use serde_json::json;
use tether_testkit::{RpcClient, ServerProcess, Target, wait};

mod common;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_per_session_are_bounded() {
    let server = ServerProcess::start_with(Target::Tether, &["--max-processes-per-session", "2"])
        .await
        .unwrap();
    let mut client = RpcClient::connect(&server.url).await.unwrap();
    client.initialize(None).await.unwrap().unwrap();
    client.ok("process/start", common::exec("a", "sleep 30")).await.unwrap();
    client.ok("process/start", common::exec("b", "sleep 30")).await.unwrap();
    let refused = client.err("process/start", common::exec("c", "true")).await.unwrap();
    assert_eq!(refused.code, -32600);
    assert!(
        refused.message.contains("too many processes")
            && refused.message.contains("--max-processes-per-session"),
        "{}",
        refused.message
    );
    // A finished process frees its place.
    client.ok("process/terminate", json!({"processId": "a"})).await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        match client.call("process/start", common::exec("c", "true")).await.unwrap() {
            Ok(_) => break,
            Err(error) => assert!(error.message.contains("too many"), "{}", error.message),
        }
        assert!(tokio::time::Instant::now() < deadline, "the place was never freed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_are_bounded_but_a_resume_is_not_a_new_one() {
    let server = ServerProcess::start_with(Target::Tether, &["--max-sessions", "1"]).await.unwrap();
    let mut first = RpcClient::connect(&server.url).await.unwrap();
    let session = first.initialize(None).await.unwrap().unwrap();
    let session_id = session["sessionId"].as_str().unwrap().to_owned();

    let mut second = RpcClient::connect(&server.url).await.unwrap();
    let refused = second.initialize(None).await.unwrap().unwrap_err();
    assert_eq!(refused.code, -32600);
    assert!(
        refused.message.contains("too many sessions") && refused.message.contains("--max-sessions"),
        "{}",
        refused.message
    );

    drop(first);
    let url = server.url.as_str();
    let session_id = session_id.as_str();
    wait::until_async("the session to come back", Duration::from_secs(10), move || async move {
        let mut again = RpcClient::connect(url).await.unwrap();
        match again.initialize(Some(session_id)).await.unwrap() {
            Ok(_) => true,
            // Still attached to the first connection until the server notices it is gone.
            Err(error) => {
                assert_eq!(error.code, -32010, "{}", error.message);
                false
            }
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_are_bounded() {
    let server =
        ServerProcess::start_with(Target::Tether, &["--max-connections", "1"]).await.unwrap();
    let first = RpcClient::connect(&server.url).await.unwrap();
    let refused = tokio_tungstenite::connect_async(server.url.as_str()).await.err().unwrap();
    match refused {
        tokio_tungstenite::tungstenite::Error::Http(response) => {
            assert_eq!(response.status().as_u16(), 503);
            let body = String::from_utf8_lossy(response.body().as_deref().unwrap_or_default())
                .into_owned();
            assert!(
                body.contains("too many connections") && body.contains("--max-connections"),
                "{body}"
            );
        }
        other => panic!("{other}"),
    }
    drop(first);
    let url = server.url.as_str();
    wait::until_async("the place to be freed", Duration::from_secs(10), move || async move {
        RpcClient::connect(url).await.is_ok()
    })
    .await;
}

/// Six clients read an 11 MB file whole at once, on a server whose whole-file reads may hold
/// 16 MiB: the reads take turns, so the server's memory peaks at about one read's worth
/// (bytes, base64, frame: some 45 MB) instead of six — and every read is answered in full.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn whole_file_reads_take_turns_within_the_server_wide_budget() {
    let budget = (16 * 1024 * 1024).to_string();
    let server = ServerProcess::start_with(Target::Tether, &["--file-read-budget-bytes", &budget])
        .await
        .unwrap();
    let dir =
        std::path::PathBuf::from(format!("/var/tmp/tether-read-budget-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("eleven.bin");
    std::fs::write(&file, vec![42u8; 11_000_000]).unwrap();
    let serving = tether_testkit::process_stats::serving_pid(server.pid().unwrap());
    let before = tether_testkit::process_stats::peak_rss_kib(serving).unwrap();

    let mut readers = Vec::new();
    for _ in 0..6 {
        let (url, uri) = (server.url.clone(), format!("file://{}", file.display()));
        readers.push(tokio::spawn(async move {
            let (mut client, _) = RpcClient::connect_initialized(&url).await.unwrap();
            let read = client.ok("fs/readFile", json!({"path": uri})).await.unwrap();
            read["dataBase64"].as_str().unwrap().len()
        }));
    }
    for reader in readers {
        assert_eq!(reader.await.unwrap(), 11_000_000usize.div_ceil(3) * 4, "answered in full");
    }
    let grew_mib = (tether_testkit::process_stats::peak_rss_kib(serving).unwrap() - before) / 1024;
    assert!(grew_mib < 120, "the server's memory peaked {grew_mib} MiB higher");

    // A file bigger than the whole budget is refused, with what to do instead.
    let small = ServerProcess::start_with(Target::Tether, &["--file-read-budget-bytes", "1048576"])
        .await
        .unwrap();
    let (mut client, _) = RpcClient::connect_initialized(&small.url).await.unwrap();
    let uri = format!("file://{}", file.display());
    let refused = client.err("fs/readFile", json!({"path": uri})).await.unwrap();
    assert!(
        refused.message.contains("whole-file reads may hold 1048576 bytes at once (--file-read-budget-bytes); read it in blocks with fs/open and fs/readBlock"),
        "{}",
        refused.message
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Polls `GET /metrics` until the exposition text passes `check`; the text then.
async fn scrape_until(server: &ServerProcess, check: impl Fn(&str) -> bool) -> String {
    let check = &check;
    wait::until_some_async("the metrics to get there", Duration::from_secs(10), || async move {
        let (_, text) = common::scrape(server, None).await;
        check(&text).then_some(text)
    })
    .await
}

/// Polls `GET /metrics` until the sample `name` passes `check`; the exposition text then.
async fn metric_until(server: &ServerProcess, name: &str, check: impl Fn(f64) -> bool) -> String {
    scrape_until(server, |text| check(common::sample(text, name))).await
}

/// Reads a process until its close.
async fn read_to_close(client: &mut RpcClient, id: &str) {
    let mut after = 0;
    loop {
        let params = json!({"processId": id, "afterSeq": after, "waitMs": 10000, "maxBytes": 1});
        let read = client.ok("process/read", params).await.unwrap();
        if read["closed"] == true {
            return;
        }
        after = read["nextSeq"].as_u64().unwrap() - 1;
    }
}

/// Starts `sleep 600` in the client's session as process `p`, and returns its pid.
async fn start_sleeper(client: &mut RpcClient) -> u32 {
    client.ok("process/start", common::exec("p", "echo $$; exec sleep 600")).await.unwrap();
    let read = client.ok("process/read", json!({"processId": "p", "waitMs": 10000})).await.unwrap();
    common::text(&read["chunks"]).trim().parse().unwrap()
}

/// Eight processes in two sessions each print 512 KiB, on a server whose processes may retain
/// 1 MiB in memory together: what they hold settles within the budget, and every byte is
/// accounted for — still held, or counted as shed, with each process's `oldestRetainedSeq`
/// saying where what it still holds begins. The largest holders pay: every process gives up
/// some and keeps some, at least half of an equal share (shares are uneven by up to a whole
/// 64 KiB read), where dropping the oldest output server-wide would empty some and leave
/// others whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retained_output_is_bounded_server_wide_and_what_is_shed_is_told() {
    const PROCESSES: usize = 8;
    const EACH: usize = 512 * 1024;
    const BUDGET: usize = 1024 * 1024;
    let budget = BUDGET.to_string();
    let server =
        ServerProcess::start_with(Target::Tether, &["--max-retained-output-bytes", &budget])
            .await
            .unwrap();
    let mut clients = Vec::new();
    for _ in 0..2 {
        clients.push(RpcClient::connect_initialized(&server.url).await.unwrap().0);
    }
    let script = format!("head -c {EACH} /dev/zero | tr '\\0' x");
    for n in 0..PROCESSES {
        let start = common::exec(&format!("p{n}"), &script);
        clients[n % 2].ok("process/start", start).await.unwrap();
    }
    for n in 0..PROCESSES {
        read_to_close(&mut clients[n % 2], &format!("p{n}")).await;
    }

    let memory = r#"tether_retained_output_bytes{where="memory"}"#;
    let text = metric_until(&server, memory, |held| held <= BUDGET as f64).await;
    let held = common::sample(&text, memory) as usize;
    let shed = common::sample(&text, "tether_retained_output_shed_bytes_total") as usize;
    assert_eq!(held + shed, PROCESSES * EACH, "every byte is held or counted as shed");

    let mut read_back = 0;
    for n in 0..PROCESSES {
        let id = format!("p{n}");
        let read = clients[n % 2].ok("process/read", json!({"processId": id})).await.unwrap();
        let oldest = read["oldestRetainedSeq"].as_u64().unwrap();
        assert!(oldest > 1, "{id} held more than its share: {read}");
        if let Some(first) = read["chunks"].as_array().unwrap().first() {
            assert_eq!(first["seq"].as_u64().unwrap(), oldest, "{id} reads from where it holds");
        }
        let text = common::text(&read["chunks"]);
        assert!(text.len() > BUDGET / PROCESSES / 2, "{id} holds {} bytes", text.len());
        assert!(text.bytes().all(|b| b == b'x'));
        read_back += text.len();
    }
    assert_eq!(read_back, held, "what reads return is what the server says it holds");
}

/// Detached sessions that asked to wait a day fill the session table: a new client still gets
/// a session, and the session detached longest ago is ended for it — its process killed, a
/// resume of it answered as an expired one's. Only a table of attached sessions refuses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_table_ends_its_oldest_detached_session_for_a_new_one() {
    let server = ServerProcess::start_with(Target::Tether, &["--max-sessions", "3"]).await.unwrap();
    let detached = r#"tether_sessions{state="detached"}"#;
    let (mut ids, mut pids) = (Vec::new(), Vec::new());
    for n in 0..3 {
        let mut client = RpcClient::connect(&server.url).await.unwrap();
        ids.push(client.initialize_detachable(86_400).await.unwrap());
        pids.push(start_sleeper(&mut client).await);
        client.close().await;
        // One at a time, so which detached first is known.
        metric_until(&server, detached, |count| count == (n + 1) as f64).await;
    }

    let mut newcomer = RpcClient::connect(&server.url).await.unwrap();
    newcomer.initialize(None).await.unwrap().unwrap();
    assert!(common::dies_soon(pids[0]).await, "the evicted session's process is killed");
    let mut late = RpcClient::connect(&server.url).await.unwrap();
    let error = late.initialize(Some(&ids[0])).await.unwrap().unwrap_err();
    assert_eq!((error.code, error.message), (-32600, format!("unknown session id {}", ids[0])));
    let text =
        metric_until(&server, r#"tether_sessions_evicted_total{reason="server_full"}"#, |n| {
            n == 1.0
        })
        .await;
    assert_eq!(
        common::sample(&text, r#"tether_sessions_refused_total{reason="too_many_sessions"}"#),
        0.0
    );

    // The others wait on, their processes running; resumed, every session is attached.
    let mut resumed = Vec::new();
    for (id, pid) in ids[1..].iter().zip(&pids[1..]) {
        let mut client = RpcClient::connect(&server.url).await.unwrap();
        client.initialize(Some(id)).await.unwrap().unwrap();
        assert!(common::is_alive(*pid));
        resumed.push(client);
    }
    let mut refused = RpcClient::connect(&server.url).await.unwrap();
    let error = refused.initialize(None).await.unwrap().unwrap_err();
    assert_eq!(error.code, -32600);
    assert_eq!(
        error.message,
        "too many sessions on this server: the limit is 3 (--max-sessions) and each is attached to a connection; try again later, or on another executor"
    );
    metric_until(&server, r#"tether_sessions_refused_total{reason="too_many_sessions"}"#, |n| {
        n == 1.0
    })
    .await;
}

/// Without authentication a client is its address: one address may hold two sessions here.
/// A third is refused while both are attached; another address is another client; once one
/// of the first client's sessions is detached, it is ended to make room for the client's new
/// one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_per_client_are_bounded_by_address() {
    let server = ServerProcess::start_with(Target::Tether, &["--max-sessions-per-client", "2"])
        .await
        .unwrap();
    let mut first = RpcClient::connect(&server.url).await.unwrap();
    let first_id = first.initialize_detachable(86_400).await.unwrap();
    let first_pid = start_sleeper(&mut first).await;
    let (_second, _) = RpcClient::connect_initialized(&server.url).await.unwrap();

    let mut third = RpcClient::connect(&server.url).await.unwrap();
    let error = third.initialize(None).await.unwrap().unwrap_err();
    assert_eq!(error.code, -32600);
    assert_eq!(
        error.message,
        "too many sessions for this client (address 127.0.0.1): the limit is 2 per client (--max-sessions-per-client) and each is attached to a connection; close one of this client's connections, or try again later"
    );
    let refused = r#"tether_sessions_refused_total{reason="too_many_sessions_for_client"}"#;
    metric_until(&server, refused, |n| n == 1.0).await;

    let other = "127.0.0.2".parse().unwrap();
    let mut elsewhere = RpcClient::connect_from(&server.url, other).await.unwrap();
    elsewhere.initialize(None).await.unwrap().unwrap();

    first.close().await;
    metric_until(&server, r#"tether_sessions{state="detached"}"#, |n| n == 1.0).await;
    // The refused connection may ask again.
    third.initialize(None).await.unwrap().unwrap();
    assert!(common::dies_soon(first_pid).await, "the evicted session's process is killed");
    let mut late = RpcClient::connect(&server.url).await.unwrap();
    let error = late.initialize(Some(&first_id)).await.unwrap().unwrap_err();
    assert_eq!((error.code, error.message), (-32600, format!("unknown session id {first_id}")));
    let text = common::scrape(&server, None).await.1;
    assert_eq!(
        common::sample(&text, r#"tether_sessions_evicted_total{reason="client_full"}"#),
        1.0
    );
    assert_eq!(
        common::sample(&text, r#"tether_sessions_evicted_total{reason="server_full"}"#),
        0.0
    );
}

/// With `--spill-output-dir`, what the server-wide budget sheds goes to disk instead: memory
/// stays within the budget, and every process still reads back all it printed, from its
/// first sequence — processes that print nothing more included (they sleep once done).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_spill_what_the_budget_sheds_is_kept_on_disk() {
    const PROCESSES: usize = 4;
    const EACH: usize = 1024 * 1024;
    const BUDGET: usize = 1024 * 1024;
    let dir =
        std::path::PathBuf::from(format!("/var/tmp/tether-budget-spill-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let budget = BUDGET.to_string();
    let args =
        ["--max-retained-output-bytes", &budget, "--spill-output-dir", dir.to_str().unwrap()];
    let server = ServerProcess::start_with(Target::Tether, &args).await.unwrap();
    let (mut client, _) = RpcClient::connect_initialized(&server.url).await.unwrap();
    let script = format!("head -c {EACH} /dev/zero | tr '\\0' x; exec sleep 600");
    for n in 0..PROCESSES {
        client.ok("process/start", common::exec(&format!("p{n}"), &script)).await.unwrap();
    }

    let memory = r#"tether_retained_output_bytes{where="memory"}"#;
    let disk = r#"tether_retained_output_bytes{where="disk"}"#;
    let all = (PROCESSES * EACH) as f64;
    let text = scrape_until(&server, |text| {
        let (held, spilled) = (common::sample(text, memory), common::sample(text, disk));
        held + spilled == all && held <= BUDGET as f64
    })
    .await;
    assert!(common::sample(&text, "tether_retained_output_shed_bytes_total") > 0.0);

    for n in 0..PROCESSES {
        let (mut after, mut read_back) = (0, 0);
        loop {
            let params =
                json!({"processId": format!("p{n}"), "afterSeq": after, "maxBytes": 65536});
            let read = client.ok("process/read", params).await.unwrap();
            assert_eq!(read["oldestRetainedSeq"], 1, "nothing of p{n} was dropped");
            let text = common::text(&read["chunks"]);
            if text.is_empty() {
                break;
            }
            assert!(text.bytes().all(|b| b == b'x'));
            read_back += text.len();
            after = read["nextSeq"].as_u64().unwrap() - 1;
        }
        assert_eq!(read_back, EACH, "p{n} reads back all it printed");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
