//! `shardlift store --request-timeout-ms`: out-of-range values are refused before anything
//! is opened, and against an endpoint that accepts connections but never answers (a
//! listener on loopback that this test never reads) a command fails with a typed error
//! within the bound the flag sets, where the default bounds would wait 30 s per attempt.
use std::net::TcpListener;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

fn shardlift(args: &[&str], endpoint: &str) -> Output {
    // Endpoint and credentials always set: the client never looks anywhere else.
    Command::new(env!("CARGO_BIN_EXE_shardlift"))
        .args(args)
        .env_clear()
        .env("AWS_ENDPOINT_URL", endpoint)
        .env("AWS_REGION", "garage")
        .env("AWS_ACCESS_KEY_ID", "GK0000000000000000000000")
        .env("AWS_SECRET_ACCESS_KEY", "0".repeat(64))
        .env("AWS_ALLOW_HTTP", "true")
        .output()
        .expect("run shardlift")
}

#[test]
fn a_request_timeout_out_of_range_is_refused() {
    for value in ["0", "600001", "ten"] {
        let out = shardlift(
            &[
                "store",
                "recover",
                "--store",
                "s3://bucket-x/prefix",
                "--json",
                "--request-timeout-ms",
                value,
            ],
            "http://127.0.0.1:9",
        );
        assert_eq!(out.status.code(), Some(2), "value {value}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("--request-timeout-ms"),
            "value {value}: {stderr}"
        );
        assert!(out.stdout.is_empty(), "value {value}: nothing on stdout");
    }
}

#[test]
fn a_silent_endpoint_fails_typed_within_the_request_timeout() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback listener");
    let endpoint = format!("http://{}", listener.local_addr().expect("address"));
    let request_timeout_ms = 300u64;
    let started = Instant::now();
    let out = shardlift(
        &[
            "store",
            "--request-timeout-ms",
            &request_timeout_ms.to_string(),
            "recover",
            "--store",
            "s3://bucket-x/prefix",
            "--json",
        ],
        &endpoint,
    );
    let took = started.elapsed();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("error JSON");
    let kind = json["error"]["kind"].as_str().unwrap_or_default();
    assert!(kind == "request" || kind == "timeout", "{json}");
    // (3 retries + 2) x 300 ms bounds the operation; the process around it takes a little
    // more. The default bounds would take at least 30 s here.
    assert!(
        took < Duration::from_secs(10),
        "took {took:?} with --request-timeout-ms {request_timeout_ms}"
    );
    drop(listener);
}
