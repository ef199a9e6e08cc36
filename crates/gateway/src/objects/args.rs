//! The `--object-store-*` flags, shared by `syncular-gateway` and `syncular-object-mover`.

use clap::Args;

/// Where the bucket is and how the mover works. The credentials come from the environment only
/// (a flag would show in `ps`): `SYNCULAR_OBJECT_STORE_ACCESS_KEY_ID` and
/// `SYNCULAR_OBJECT_STORE_SECRET_ACCESS_KEY`; the secret is never logged nor stored in Postgres
/// (the extension gets per-day derived signing keys).
#[derive(Debug, Clone, Args)]
pub struct ObjectStoreArgs {
    /// S3-compatible endpoint the mover talks to (`http(s)://host[:port]`, path-style requests
    /// `{endpoint}/{bucket}/{key}`). Unset: no object store (every byte is served from Postgres).
    #[arg(long, env = "SYNCULAR_GATEWAY_OBJECT_STORE_ENDPOINT")]
    pub object_store_endpoint: Option<String>,

    /// Origin the presigned URLs name, when clients reach the bucket elsewhere than the mover
    /// (a CDN, a public host name). Default: `--object-store-endpoint`.
    #[arg(long, env = "SYNCULAR_GATEWAY_OBJECT_STORE_PUBLIC_ENDPOINT")]
    pub object_store_public_endpoint: Option<String>,

    /// The bucket (it must exist).
    #[arg(long, env = "SYNCULAR_GATEWAY_OBJECT_STORE_BUCKET", default_value = "syncular")]
    pub object_store_bucket: String,

    /// The SigV4 region (`auto` for R2).
    #[arg(long, env = "SYNCULAR_GATEWAY_OBJECT_STORE_REGION", default_value = "us-east-1")]
    pub object_store_region: String,

    /// Key prefix inside the bucket: empty or ending in `/` (e.g. `syncular/`).
    #[arg(long, env = "SYNCULAR_GATEWAY_OBJECT_STORE_PREFIX", default_value = "")]
    pub object_store_prefix: String,

    /// Presigned-URL lifetime, seconds (1 ..= 900, SPEC §5.4).
    #[arg(long, env = "SYNCULAR_GATEWAY_OBJECT_STORE_URL_TTL_SECS", default_value_t = 900,
          value_parser = clap::value_parser!(i32).range(1..=900))]
    pub object_store_url_ttl_secs: i32,

    /// How often the mover asks for work and probes the bucket, ms: a presigned upload is
    /// verified (and a push referencing it can apply) within about this time of its PUT.
    #[arg(long, env = "SYNCULAR_GATEWAY_OBJECT_STORE_INTERVAL_MS", default_value_t = 250,
          value_parser = clap::value_parser!(u64).range(10..=60_000))]
    pub object_store_interval_ms: u64,

    /// Re-check (HEAD) every stored object this often, ms: an object deleted or changed behind
    /// the mover's back is found within this time and copied again (or, held only by the bucket,
    /// reported lost).
    #[arg(long, env = "SYNCULAR_GATEWAY_OBJECT_STORE_CHECK_AFTER_MS", default_value_t = 60_000)]
    pub object_store_check_after_ms: u64,

    /// Scan whole tables this often, ms: copies older than two minutes (a mover that was down)
    /// and the objects of deleted segments and blobs are found by that scan.
    #[arg(long, env = "SYNCULAR_GATEWAY_OBJECT_STORE_SCAN_AFTER_MS", default_value_t = 60_000)]
    pub object_store_scan_after_ms: u64,

    /// Bucket requests in flight at once.
    #[arg(long, env = "SYNCULAR_GATEWAY_OBJECT_STORE_CONCURRENCY", default_value_t = 4,
          value_parser = clap::value_parser!(u64).range(1..=64))]
    pub object_store_concurrency: u64,
}

impl ObjectStoreArgs {
    /// Whether the tier is on (`--object-store-endpoint` given).
    pub fn enabled(&self) -> bool {
        self.object_store_endpoint.is_some()
    }
}

/// The access key pair, from `SYNCULAR_OBJECT_STORE_ACCESS_KEY_ID` and
/// `SYNCULAR_OBJECT_STORE_SECRET_ACCESS_KEY`. Errors name the missing variable, never a value.
pub fn credentials_from_env() -> Result<(String, String), String> {
    let get = |name: &str| match std::env::var(name) {
        Ok(v) if !v.is_empty() => Ok(v),
        _ => Err(format!("--object-store-endpoint needs the environment variable {name}")),
    };
    Ok((get("SYNCULAR_OBJECT_STORE_ACCESS_KEY_ID")?, get("SYNCULAR_OBJECT_STORE_SECRET_ACCESS_KEY")?))
}
