//! A real S3-compatible server for the object-store tests: the `s3s-fs` binary (crate `s3s-fs`
//! 0.14.1, installed by `scripts/setup` into `$SYNCULAR_TOOLS/bin`, path exported by
//! `scripts/test` as `SYNCULAR_S3S_FS`), started per test on 127.0.0.1 with a free port, a fresh
//! root directory and fixed credentials, with one bucket created.
//!
//! s3s-fs stores object `key` of bucket `b` as the plain file `<root>/b/key` (a `/` in the key is
//! a subdirectory; `..` cannot leave the root), so a test can tamper with or delete an object
//! behind the server's back ([`S3Server::object_path`]). Beside it, in the root directory,
//! `.bucket-<b64(b)>.object-<b64(key)>.internal.json` (URL-safe base64, no padding) records the
//! ETag (MD5 hex of the body, computed at PUT) and the checksums given at PUT; HEAD and GET report
//! that ETag, not one of the file's current bytes ([`S3Server::internal_info_path`]).
//! `.metadata.json` holds the content type and `x-amz-meta-*`.
//!
//! Requests are path-style (`http://127.0.0.1:PORT/bucket/key`) and SigV4-signed, presigned by
//! [`rusty_s3`] from [`S3Server::s3_bucket`] and [`S3Server::credentials`].

use std::fs::{self, File, OpenOptions};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use base64::Engine;
use rusty_s3::{Bucket, Credentials, S3Action, UrlStyle};

/// Environment variable holding the path of the `s3s-fs` binary.
pub const S3S_FS_ENV: &str = "SYNCULAR_S3S_FS";
/// Where `scripts/setup` installs `s3s-fs` when `SYNCULAR_TOOLS` is unset.
pub const DEFAULT_S3S_FS: &str = "/opt/syncular-tools/bin/s3s-fs";
/// The access key id every test server accepts (its only one).
pub const ACCESS_KEY_ID: &str = "syncular-test-access-key";
/// The secret access key matching [`ACCESS_KEY_ID`].
pub const SECRET_ACCESS_KEY: &str = "syncular-test-secret-key-not-a-secret";
/// The region requests are signed for (s3s-fs accepts any; this is the usual default).
pub const REGION: &str = "us-east-1";
/// The bucket [`S3Server::start`] creates.
pub const DEFAULT_BUCKET: &str = "syncular-test";

/// How long the server may take to listen (and a presigned URL the fixture signs lives).
const STARTUP: Duration = Duration::from_secs(15);

/// A running `s3s-fs` with one bucket; killed, and its directory removed, on drop (kept, with its
/// path printed, when the test panicked).
pub struct S3Server {
    binary: PathBuf,
    /// Holds `root/` (the server's data) and `s3s-fs.log` (its stdout and stderr).
    dir: PathBuf,
    port: u16,
    bucket: String,
    child: Option<Child>,
}

impl S3Server {
    /// Starts a server with the bucket [`DEFAULT_BUCKET`].
    ///
    /// Panics when the binary is missing (run `scripts/setup`), or when the server does not
    /// listen or refuses to create the bucket.
    pub fn start() -> S3Server {
        S3Server::start_with_bucket(DEFAULT_BUCKET)
    }

    /// Starts a server with the bucket `bucket` (an S3 bucket name: 3-63 of `a-z0-9.-`).
    pub fn start_with_bucket(bucket: &str) -> S3Server {
        let binary = PathBuf::from(std::env::var(S3S_FS_ENV).unwrap_or_else(|_| DEFAULT_S3S_FS.into()));
        assert!(
            binary.is_file(),
            "no s3s-fs binary at {} ({S3S_FS_ENV}): run scripts/setup (it installs s3s-fs 0.14.1 into \
             $SYNCULAR_TOOLS/bin, default /opt/syncular-tools/bin) or set {S3S_FS_ENV}",
            binary.display()
        );
        static SEQ: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "syncular-s3-{}-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed),
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos()
        ));
        fs::create_dir_all(dir.join("root")).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
        let mut server = S3Server { binary, dir, port: 0, bucket: bucket.to_string(), child: None };
        // Port 0: the server picks a free port and logs it (no race with another test's server).
        server.spawn(0);
        let url = rusty_s3::actions::CreateBucket::new(&server.s3_bucket(), &server.credentials()).sign(STARTUP);
        let resp = agent().put(url.as_str()).send_empty().unwrap_or_else(|e| panic!("create bucket {bucket}: {e}"));
        assert_eq!(resp.status().as_u16(), 200, "create bucket {bucket}: {resp:?}\n{}", server.log());
        server
    }

    /// `http://127.0.0.1:PORT` (the same across [`restart`](Self::restart)).
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The bucket created at start.
    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    /// [`ACCESS_KEY_ID`].
    pub fn access_key_id(&self) -> &str {
        ACCESS_KEY_ID
    }

    /// [`SECRET_ACCESS_KEY`].
    pub fn secret_access_key(&self) -> &str {
        SECRET_ACCESS_KEY
    }

    /// The server's root directory (one subdirectory per bucket, plus s3s-fs's JSON sidecars).
    pub fn root_dir(&self) -> PathBuf {
        self.dir.join("root")
    }

    /// The file holding object `key`'s bytes: `<root>/<bucket>/<key>`.
    pub fn object_path(&self, key: &str) -> PathBuf {
        self.root_dir().join(&self.bucket).join(key)
    }

    /// The JSON where s3s-fs keeps object `key`'s ETag (`{"etag": "<md5 hex>", …}` plus the
    /// checksums given at PUT); HEAD and GET report this ETag even after the file changed.
    pub fn internal_info_path(&self, key: &str) -> PathBuf {
        let b64 = |s: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
        self.root_dir().join(format!(".bucket-{}.object-{}.internal.json", b64(&self.bucket), b64(key)))
    }

    /// The bucket as [`rusty_s3`] addresses it (path style, [`REGION`]), for presigning.
    pub fn s3_bucket(&self) -> Bucket {
        Bucket::new(self.endpoint().parse().unwrap(), UrlStyle::Path, self.bucket.clone(), REGION).unwrap()
    }

    /// The server's credentials for [`rusty_s3`].
    pub fn credentials(&self) -> Credentials {
        Credentials::new(ACCESS_KEY_ID, SECRET_ACCESS_KEY)
    }

    /// Whether the process runs (false between [`stop`](Self::stop) and
    /// [`restart`](Self::restart)).
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// Kills the server (SIGKILL, as a crash: no graceful shutdown); requests then fail to
    /// connect. The root directory stays. A no-op when stopped.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops the server if it runs, then starts it again on the same port and root directory
    /// (the objects written before are served again).
    pub fn restart(&mut self) {
        self.stop();
        self.spawn(self.port);
    }

    /// The server's log so far (stdout and stderr, every run).
    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.join("s3s-fs.log")).unwrap_or_default()
    }

    /// Runs the binary on `port` (0: any) and waits for its "server is running at" line.
    fn spawn(&mut self, port: u16) {
        let log_path = self.dir.join("s3s-fs.log");
        let log_start = fs::metadata(&log_path).map(|m| m.len() as usize).unwrap_or(0);
        let log: File = OpenOptions::new().create(true).append(true).open(&log_path).unwrap();
        let child = Command::new(&self.binary)
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .args(["--access-key", ACCESS_KEY_ID, "--secret-key", SECRET_ACCESS_KEY])
            .arg(self.root_dir())
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", self.binary.display()));
        self.child = Some(child);
        let deadline = Instant::now() + STARTUP;
        const READY: &str = "server is running at http://127.0.0.1:";
        loop {
            let text = self.log();
            if let Some(at) = text.get(log_start..).and_then(|t| t.find(READY)).map(|i| log_start + i + READY.len()) {
                let digits: String = text[at..].chars().take_while(char::is_ascii_digit).collect();
                self.port = digits.parse().unwrap_or_else(|_| panic!("bad port in the s3s-fs log:\n{text}"));
                assert!(port == 0 || self.port == port, "s3s-fs listens on {} instead of {port}", self.port);
                return;
            }
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                self.child = None;
                panic!("s3s-fs exited ({status}) before listening:\n{text}");
            }
            assert!(Instant::now() < deadline, "s3s-fs did not listen within {STARTUP:?}:\n{text}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        self.stop();
        if std::thread::panicking() {
            eprintln!("s3s-fs directory kept for inspection: {}", self.dir.display());
        } else {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

/// An HTTP agent for the store: statuses are returned, not errors; 10 s timeout.
pub fn agent() -> ureq::Agent {
    ureq::Agent::config_builder().http_status_as_error(false).timeout_global(Some(Duration::from_secs(10))).build().into()
}
