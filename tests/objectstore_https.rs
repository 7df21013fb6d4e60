//! The S3 store over HTTPS (objectstore lane): real S3 endpoints are TLS, and the client's
//! TLS stack (reqwest over rustls with ring as the crypto provider, installed by
//! `ObjClient::open`) is only exercised when a request goes through it.
//!
//! Garage serves plain HTTP, so the test puts a TLS-terminating proxy in front of node 0:
//! rustls on a real 127.0.0.1 socket, forwarding the decrypted bytes to Garage. The
//! `shardlift` child then talks to `https://localhost:PORT`. It trusts the test CA through
//! `SSL_CERT_FILE`, which the platform verifier's Linux root store reads
//! (rustls-native-certs), so nothing in ShardLift is test-specific.
//!
//! `tests/fixtures/tls/` was made once with openssl 3.0 (P-256): a CA (`ca.pem`,
//! `CA:TRUE`, its key thrown away) and a leaf for `localhost` and `127.0.0.1`
//! (`localhost.pem`, `serverAuth`, key `localhost.key` in PKCS#8), both valid until 2126.
//! They guard nothing but these tests.
mod objectstore_support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustix::event::{poll, PollFd, PollFlags, Timespec};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ServerConfig, ServerConnection};

use objectstore_support::{fresh_url, required, shardlift_exe};

/// How long one proxied connection may live (a publish of the small state takes seconds).
const CONNECTION_DEADLINE_MS: u64 = 120_000;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/tls")
        .join(name)
}

/// What the proxy saw: handshakes completed, TLS errors (a refused handshake among them)
/// and plaintext bytes carried each way.
#[derive(Default)]
struct ProxyCounts {
    handshakes: AtomicU64,
    bytes_to_garage: AtomicU64,
    bytes_from_garage: AtomicU64,
    tls_errors: AtomicU64,
}

/// Starts the proxy on an ephemeral port; returns its port and its counts. Its threads
/// live until the test process exits.
fn start_tls_proxy(upstream: SocketAddr) -> (u16, Arc<ProxyCounts>) {
    let certificates = CertificateDer::pem_file_iter(fixture("localhost.pem"))
        .expect("open the leaf certificate")
        .collect::<Result<Vec<_>, _>>()
        .expect("parse the leaf certificate");
    let key = PrivateKeyDer::from_pem_file(fixture("localhost.key")).expect("the leaf key");
    let config = Arc::new(
        ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .expect("TLS versions")
            .with_no_client_auth()
            .with_single_cert(certificates, key)
            .expect("server certificate and key"),
    );
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
    let port = listener.local_addr().expect("proxy address").port();
    let counts = Arc::new(ProxyCounts::default());
    let shared = Arc::clone(&counts);
    std::thread::spawn(move || {
        for client in listener.incoming().flatten() {
            let config = Arc::clone(&config);
            let counts = Arc::clone(&shared);
            std::thread::spawn(move || {
                let _ = carry(client, upstream, config, &counts);
            });
        }
    });
    (port, counts)
}

fn io_error(error: rustls::Error) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, error)
}

/// Carries one connection: TLS from the client, plain bytes to and from Garage, until
/// either side closes or the deadline passes. Reads happen only after `poll` says the
/// socket is readable, so the blocking sockets never block on a read.
fn carry(
    mut client: TcpStream,
    upstream: SocketAddr,
    config: Arc<ServerConfig>,
    counts: &ProxyCounts,
) -> std::io::Result<()> {
    let mut tls = ServerConnection::new(config).map_err(io_error)?;
    let mut garage = TcpStream::connect(upstream)?;
    let deadline = Instant::now() + Duration::from_millis(CONNECTION_DEADLINE_MS);
    let mut buffer = vec![0u8; 64 * 1024];
    let mut handshaken = false;
    while Instant::now() < deadline {
        while tls.wants_write() {
            tls.write_tls(&mut client)?;
        }
        let mut fds = [
            PollFd::new(&client, PollFlags::IN),
            PollFd::new(&garage, PollFlags::IN),
        ];
        let timeout = Timespec {
            tv_sec: 1,
            tv_nsec: 0,
        };
        poll(&mut fds, Some(&timeout))?;
        let client_ready = !fds[0].revents().is_empty();
        let garage_ready = !fds[1].revents().is_empty();
        if client_ready {
            if tls.read_tls(&mut client)? == 0 {
                return Ok(());
            }
            if let Err(error) = tls.process_new_packets() {
                // Tell the client why (an alert), then give up on this connection.
                while tls.wants_write() {
                    let _ = tls.write_tls(&mut client);
                }
                counts.tls_errors.fetch_add(1, Ordering::SeqCst);
                return Err(io_error(error));
            }
            if !handshaken && !tls.is_handshaking() {
                handshaken = true;
                counts.handshakes.fetch_add(1, Ordering::SeqCst);
            }
            loop {
                match tls.reader().read(&mut buffer) {
                    Ok(0) => return Ok(()),
                    Ok(n) => {
                        garage.write_all(&buffer[..n])?;
                        counts.bytes_to_garage.fetch_add(n as u64, Ordering::SeqCst);
                    }
                    Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(error) => return Err(error),
                }
            }
        }
        if garage_ready {
            let n = garage.read(&mut buffer)?;
            if n == 0 {
                tls.send_close_notify();
                while tls.wants_write() {
                    tls.write_tls(&mut client)?;
                }
                return Ok(());
            }
            tls.writer().write_all(&buffer[..n])?;
            counts
                .bytes_from_garage
                .fetch_add(n as u64, Ordering::SeqCst);
        }
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        "proxied connection outlived its deadline",
    ))
}

/// Garage's S3 address, from the lane's `AWS_ENDPOINT_URL` (`http://127.0.0.1:PORT`).
fn garage_address() -> SocketAddr {
    let endpoint = required("AWS_ENDPOINT_URL");
    let authority = endpoint
        .strip_prefix("http://")
        .unwrap_or_else(|| panic!("the lane's Garage endpoint is plain HTTP, not {endpoint}"))
        .trim_end_matches('/');
    authority
        .to_socket_addrs()
        .expect("resolve the Garage endpoint")
        .next()
        .expect("one Garage address")
}

/// `shardlift ARGS` against the proxy at `https://localhost:PORT`, trusting `ca_file`
/// (none: the system's roots only). Plain HTTP is not allowed in the child.
fn shardlift_over_https(
    port: u16,
    ca_file: Option<PathBuf>,
    args: &[&str],
) -> (bool, serde_json::Value, String) {
    let mut command = Command::new(shardlift_exe());
    command
        .args(args)
        .env("AWS_ENDPOINT_URL", format!("https://localhost:{port}"))
        .env_remove("AWS_ENDPOINT")
        .env_remove("AWS_ALLOW_HTTP")
        .env_remove("SSL_CERT_DIR");
    match ca_file {
        Some(path) => command.env("SSL_CERT_FILE", path),
        None => command.env_remove("SSL_CERT_FILE"),
    };
    let output = command.output().expect("run shardlift");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    let json = serde_json::from_str(&stdout).unwrap_or(serde_json::Value::Null);
    (output.status.success(), json, stderr)
}

#[test]
fn a_store_on_s3_over_https_publishes_and_recovers_through_real_tls() {
    let (port, counts) = start_tls_proxy(garage_address());
    let url = fresh_url("https");
    let ca = Some(fixture("ca.pem"));

    let (ok, published, stderr) = shardlift_over_https(
        port,
        ca.clone(),
        &["store", "publish-synthetic", "--store", &url, "--json"],
    );
    assert!(ok, "publish over HTTPS failed: {stderr}");
    let (ok, recovered, stderr) =
        shardlift_over_https(port, ca, &["store", "recover", "--store", &url, "--json"]);
    assert!(ok, "recovery over HTTPS failed: {stderr}");
    let selected = &recovered["report"]["selected"];
    assert!(
        selected.is_object(),
        "recovery selected no generation: {recovered}"
    );
    for field in ["generation", "commit_digest", "logical_state_root"] {
        assert!(!published[field].is_null(), "publish reported no {field}");
        assert_eq!(
            selected[field], published[field],
            "recovery must select what was published ({field}): {published} / {recovered}"
        );
    }

    // Every request went through the proxy's TLS: handshakes completed, and bytes went
    // both ways (the state's objects up, their listing and records down).
    assert!(counts.handshakes.load(Ordering::SeqCst) >= 2);
    assert_eq!(counts.tls_errors.load(Ordering::SeqCst), 0);
    assert!(counts.bytes_to_garage.load(Ordering::SeqCst) > 1_000_000);
    assert!(counts.bytes_from_garage.load(Ordering::SeqCst) > 0);
}

#[test]
fn an_endpoint_whose_certificate_is_not_trusted_is_refused_before_any_request() {
    let (port, counts) = start_tls_proxy(garage_address());
    let url = fresh_url("https-untrusted");

    // Without the test CA, the certificate chains to no trusted root: the handshake must
    // fail, the command must exit non-zero naming the certificate, and no request may
    // reach Garage.
    let (ok, _, stderr) = shardlift_over_https(
        port,
        None,
        &["store", "publish-synthetic", "--store", &url, "--json"],
    );
    assert!(!ok, "a publish to an untrusted endpoint must fail");
    assert!(
        stderr.contains("invalid peer certificate: UnknownIssuer"),
        "the error should say why the certificate was refused: {stderr}"
    );
    assert_eq!(counts.handshakes.load(Ordering::SeqCst), 0);
    assert_eq!(counts.bytes_to_garage.load(Ordering::SeqCst), 0);
    assert!(counts.tls_errors.load(Ordering::SeqCst) >= 1);
}
