//! The bucket requests of the mover: each one presigned with `rusty-s3` (query-string SigV4,
//! `UNSIGNED-PAYLOAD`, so bodies stream) and sent with `reqwest`. Error texts name the request
//! and the status, never a URL (it carries a signature) nor a credential.

use std::time::Duration;

use rusty_s3::{Bucket as S3Bucket, Credentials, S3Action, UrlStyle};
use sha2::{Digest, Sha256};

/// How long a presigned request of the mover's own stays valid.
const SIGN_FOR: Duration = Duration::from_secs(300);

/// What a HEAD found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Head {
    /// No such object (404).
    Absent,
    /// The object, its `Content-Length` and its ETag (quotes removed).
    Present {
        /// Its size, bytes.
        length: i64,
        /// Its ETag without the quotes.
        etag: String,
    },
}

/// The bucket, with the mover's credentials.
pub struct Bucket {
    bucket: S3Bucket,
    credentials: Credentials,
    http: reqwest::Client,
}

fn etag_of(headers: &reqwest::header::HeaderMap) -> String {
    headers.get(reqwest::header::ETAG).and_then(|v| v.to_str().ok()).unwrap_or_default().trim_matches('"').to_owned()
}

impl Bucket {
    /// The bucket `name` at `endpoint` (path style). Errors: an unusable endpoint or name.
    pub fn new(endpoint: &str, name: &str, region: &str, access_key_id: &str, secret_access_key: &str) -> Result<Self, String> {
        let url = endpoint.parse().map_err(|e| format!("--object-store-endpoint does not parse: {e}"))?;
        let bucket = S3Bucket::new(url, UrlStyle::Path, name.to_owned(), region.to_owned())
            .map_err(|e| format!("--object-store-endpoint/--object-store-bucket: {e}"))?;
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .read_timeout(Duration::from_secs(30))
            .build()
            .map_err(|e| format!("cannot build the object store's HTTP client: {e}"))?;
        Ok(Bucket { bucket, credentials: Credentials::new(access_key_id.to_owned(), secret_access_key.to_owned()), http })
    }

    /// Whether the bucket answers with these credentials (HEAD bucket → 200).
    pub async fn probe(&self) -> Result<(), String> {
        let url = self.bucket.head_bucket(Some(&self.credentials)).sign(SIGN_FOR);
        let resp = self.http.head(url).timeout(Duration::from_secs(5)).send().await.map_err(|e| format!("HEAD bucket: {}", without_url(e)))?;
        match resp.status().as_u16() {
            200 => Ok(()),
            status => Err(format!("HEAD bucket: status {status}")),
        }
    }

    /// HEAD `key`.
    pub async fn head(&self, key: &str) -> Result<Head, String> {
        let url = self.bucket.head_object(Some(&self.credentials), key).sign(SIGN_FOR);
        let resp = self.http.head(url).timeout(Duration::from_secs(10)).send().await.map_err(|e| format!("HEAD {key}: {}", without_url(e)))?;
        match resp.status().as_u16() {
            404 => Ok(Head::Absent),
            200 => {
                let length = resp
                    .headers()
                    .get(reqwest::header::CONTENT_LENGTH)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.parse::<i64>().ok())
                    .ok_or_else(|| format!("HEAD {key}: no Content-Length"))?;
                Ok(Head::Present { length, etag: etag_of(resp.headers()) })
            }
            status => Err(format!("HEAD {key}: status {status}")),
        }
    }

    /// PUT `length` bytes streamed from `body` at `key`; returns the ETag.
    pub async fn put(&self, key: &str, length: u64, body: reqwest::Body) -> Result<String, String> {
        let url = self.bucket.put_object(Some(&self.credentials), key).sign(SIGN_FOR);
        let resp = self
            .http
            .put(url)
            .header(reqwest::header::CONTENT_LENGTH, length)
            .header(reqwest::header::CONTENT_TYPE, "application/octet-stream")
            .body(body)
            .send()
            .await
            .map_err(|e| format!("PUT {key}: {}", without_url(e)))?;
        match resp.status().as_u16() {
            200 => Ok(etag_of(resp.headers())),
            status => Err(format!("PUT {key}: status {status}")),
        }
    }

    /// Copies `src` (`length` bytes) to `dst` unless `dst` exists (`If-None-Match: *`), hashing
    /// the bytes on the way: `Ok(Some((hex SHA-256, etag of dst)))` when this call wrote `dst`,
    /// `Ok(None)` when `dst` already existed (nothing written). The caller deletes `dst` when the
    /// hash is not the one expected.
    pub async fn copy_hashing(&self, src: &str, dst: &str, length: u64) -> Result<Option<(String, String)>, String> {
        use std::sync::{Arc, Mutex};
        let url = self.bucket.get_object(Some(&self.credentials), src).sign(SIGN_FOR);
        let resp = self.http.get(url).send().await.map_err(|e| format!("GET {src}: {}", without_url(e)))?;
        if resp.status().as_u16() != 200 {
            return Err(format!("GET {src}: status {}", resp.status().as_u16()));
        }
        let hasher = Arc::new(Mutex::new(Sha256::new()));
        let tap = hasher.clone();
        let body = reqwest::Body::wrap_stream(futures_util::StreamExt::map(resp.bytes_stream(), move |chunk| {
            if let (Ok(bytes), Ok(mut h)) = (&chunk, tap.lock()) {
                h.update(bytes);
            }
            chunk
        }));
        let mut put = self.bucket.put_object(Some(&self.credentials), dst);
        put.headers_mut().insert("if-none-match", "*");
        let url = put.sign(SIGN_FOR);
        let resp = self
            .http
            .put(url)
            .header(reqwest::header::CONTENT_LENGTH, length)
            .header(reqwest::header::CONTENT_TYPE, "application/octet-stream")
            .header(reqwest::header::IF_NONE_MATCH, "*")
            .body(body)
            .send()
            .await
            .map_err(|e| format!("PUT {dst}: {}", without_url(e)))?;
        match resp.status().as_u16() {
            200 => {
                let etag = etag_of(resp.headers());
                let hex = super::hex(&hasher.lock().map_err(|_| "hasher poisoned".to_owned())?.clone().finalize());
                Ok(Some((hex, etag)))
            }
            412 => Ok(None),
            status => Err(format!("PUT {dst}: status {status}")),
        }
    }

    /// GET `key` and hash it: `(lowercase hex SHA-256, length)`; `None` when absent. Stops
    /// reading (an error) past `max_len` bytes.
    pub async fn sha256(&self, key: &str, max_len: u64) -> Result<Option<(String, u64)>, String> {
        let url = self.bucket.get_object(Some(&self.credentials), key).sign(SIGN_FOR);
        let mut resp = self.http.get(url).send().await.map_err(|e| format!("GET {key}: {}", without_url(e)))?;
        match resp.status().as_u16() {
            404 => return Ok(None),
            200 => {}
            status => return Err(format!("GET {key}: status {status}")),
        }
        let mut hasher = Sha256::new();
        let mut len = 0u64;
        while let Some(chunk) = resp.chunk().await.map_err(|e| format!("GET {key}: {}", without_url(e)))? {
            len += chunk.len() as u64;
            if len > max_len {
                return Ok(Some((String::new(), len)));
            }
            hasher.update(&chunk);
        }
        let hex = super::hex(&hasher.finalize());
        Ok(Some((hex, len)))
    }

    /// DELETE `key` (an absent key is fine).
    pub async fn delete(&self, key: &str) -> Result<(), String> {
        let url = self.bucket.delete_object(Some(&self.credentials), key).sign(SIGN_FOR);
        let resp = self.http.delete(url).timeout(Duration::from_secs(10)).send().await.map_err(|e| format!("DELETE {key}: {}", without_url(e)))?;
        match resp.status().as_u16() {
            200 | 204 | 404 => Ok(()),
            status => Err(format!("DELETE {key}: status {status}")),
        }
    }
}

/// A reqwest error's text without its URL (which carries a signature).
fn without_url(e: reqwest::Error) -> String {
    e.without_url().to_string()
}
