//! `presign` (from the derived key) against rusty-s3 0.11 (from the secret),
//! byte for byte: same credentials, time, bucket, key, region, expiry and
//! signed headers, path-style URLs.

use std::time::Duration;

use jiff::Timestamp;
use proptest::prelude::*;
use rusty_s3::actions::{DeleteObject, GetObject, HeadObject, PutObject};
use rusty_s3::{Bucket, Credentials, S3Action, UrlStyle};
use syncular_object_store::{amz_date, derive_signing_key, presign, Method, PresignRequest};

/// jiff's (so rusty-s3's) last timestamp, 9999-12-30T22:00:00Z: a little before
/// our `MAX_UNIX_MS` (jiff keeps room for any time zone offset).
const JIFF_MAX_MS: i64 = 253_402_207_200_000;

struct Case<'a> {
    method: Method,
    endpoint: &'a str,
    bucket: &'a str,
    key: &'a str,
    region: &'a str,
    access_key_id: &'a str,
    secret: &'a str,
    unix_ms: i64,
    expires_seconds: u64,
    headers: &'a [(&'a str, &'a str)],
}

/// The URL rusty-s3 signs with the secret (headers inserted into its sorted map).
fn reference(c: &Case<'_>) -> String {
    let endpoint = c.endpoint.parse().expect("endpoint parses as a URL");
    let bucket = Bucket::new(
        endpoint,
        UrlStyle::Path,
        c.bucket.to_owned(),
        c.region.to_owned(),
    )
    .expect("rusty-s3 accepts the bucket");
    let credentials = Credentials::new(c.access_key_id, c.secret);
    let time = Timestamp::from_millisecond(c.unix_ms).expect("time in jiff's range");
    let expires = Duration::from_secs(c.expires_seconds);
    macro_rules! sign {
        ($action:ident) => {{
            let mut action = $action::new(&bucket, Some(&credentials), c.key);
            for &(name, value) in c.headers {
                action.headers_mut().insert(name, value);
            }
            action.sign_with_time(expires, &time).to_string()
        }};
    }
    match c.method {
        Method::Get => sign!(GetObject),
        Method::Put => sign!(PutObject),
        Method::Head => sign!(HeadObject),
        Method::Delete => sign!(DeleteObject),
    }
}

/// Our URL, from the key derived for the request's day (headers as given, unsorted).
fn ours(c: &Case<'_>) -> String {
    let (day, _) = amz_date(c.unix_ms).expect("time in range");
    let req = PresignRequest {
        method: c.method,
        endpoint: c.endpoint,
        bucket: c.bucket,
        key: c.key,
        region: c.region,
        access_key_id: c.access_key_id,
        signing_key: derive_signing_key(c.secret, &day, c.region),
        signing_day: &day,
        unix_ms: c.unix_ms,
        expires_seconds: c.expires_seconds,
        extra_signed_headers: c.headers,
    };
    let signed = presign(&req).unwrap_or_else(|e| panic!("presign {:?}: {e}", c.key));
    assert_eq!(
        signed.expires_at_ms,
        (c.unix_ms / 1000 + i64::try_from(c.expires_seconds).unwrap()) * 1000
    );
    signed.url
}

fn assert_same(c: &Case<'_>) {
    assert_eq!(ours(c), reference(c), "key {:?}", c.key);
}

const KEYS: &[&str] = &[
    "a.txt",
    "seg/sha256/e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "with space.txt",
    "  leading and trailing  ",
    "unicodé/ファイル.bin",
    "emoji 😀/🦀",
    "plus+sign",
    "eq=sign&amp",
    "colon:key;semi,comma",
    "a/b/c/d",
    "trailing/",
    "/leading",
    "double//slash",
    "/",
    "percent%20literal%2F",
    "tilde~under_score-dash.dot",
    "!*'()",
    "quote\"apostrophe'",
    "back\\slash",
    "hash#question?",
    "brackets[]{}|^`<>@$",
    "tab\tnewline\ncr\r",
    "nul\u{0}del\u{7f}",
    "...",
    "a/.../b",
    ".hidden/..dots..",
    "x",
];

const ENDPOINTS: &[&str] = &[
    "http://127.0.0.1:9000",
    "https://s3.eu-west-1.amazonaws.com",
    "https://s3.eu-west-1.amazonaws.com/",
    "http://localhost",
    "http://Example.COM:8080/",
    "http://127.0.0.1:80",
    "https://minio.example:443",
    "https://minio.example:80",
    "http://[::1]:9000",
    "http://[2001:DB8:0:0:1:0:0:1]",
];

const REGIONS: &[&str] = &["us-east-1", "eu-west-1", "ap-southeast-2", "auto", "garage"];

const TIMES: &[i64] = &[
    0,
    1_369_353_600_000,
    1_369_353_600_999,
    1_709_210_096_789,
    1_735_689_599_999,
    4_107_542_400_000,
    JIFF_MAX_MS,
];

const EXPIRIES: &[u64] = &[1, 60, 900, 3600, 86_400, 604_800];

#[test]
fn get_and_put_match_over_keys_regions_times_and_expiries() {
    let mut n = 0;
    for (i, key) in KEYS.iter().enumerate() {
        for (j, region) in REGIONS.iter().enumerate() {
            for method in [Method::Get, Method::Put] {
                let case = Case {
                    method,
                    endpoint: ENDPOINTS[(i + j) % ENDPOINTS.len()],
                    bucket: "syncular-objects",
                    key,
                    region,
                    access_key_id: "AKIAIOSFODNN7EXAMPLE",
                    secret: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
                    unix_ms: TIMES[(i * 3 + j) % TIMES.len()],
                    expires_seconds: EXPIRIES[(i + 2 * j) % EXPIRIES.len()],
                    headers: &[],
                };
                assert_same(&case);
                n += 1;
            }
        }
    }
    assert_eq!(n, KEYS.len() * REGIONS.len() * 2);
}

#[test]
fn every_endpoint_and_method_matches() {
    for endpoint in ENDPOINTS {
        for method in [Method::Get, Method::Put, Method::Head, Method::Delete] {
            for bucket in ["b.dotted.name", "UPPER_legacy-1", "minio"] {
                assert_same(&Case {
                    method,
                    endpoint,
                    bucket,
                    key: "dir/file name.bin",
                    region: "us-east-1",
                    access_key_id: "minioadmin",
                    secret: "minioadmin",
                    unix_ms: 1_700_000_000_123,
                    expires_seconds: 300,
                    headers: &[],
                });
            }
        }
    }
}

#[test]
fn put_with_signed_headers_matches() {
    let header_sets: &[&[(&str, &str)]] = &[
        &[("content-length", "1234")],
        &[("content-length", "0")],
        &[
            (
                "x-amz-checksum-sha256",
                "47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=",
            ),
            ("content-length", "18446744073709551615"),
        ],
        &[
            ("content-type", "  text/plain;   charset=utf-8 "),
            ("x-amz-meta-empty", "   "),
            ("content-length", "7"),
        ],
        &[("a-before-host", "1"), ("hosts", "2"), ("zzz", "3")],
        &[("content-disposition", "attachment; filename=\"a  b.txt\"")],
        &[("x-amz-meta-odd", "!#$%&'*+-.^_`|~ ()<>@,;:\\\"/[]?={}")],
    ];
    for (i, headers) in header_sets.iter().enumerate() {
        for key in KEYS {
            assert_same(&Case {
                method: Method::Put,
                endpoint: ENDPOINTS[i % ENDPOINTS.len()],
                bucket: "uploads",
                key,
                region: REGIONS[i % REGIONS.len()],
                access_key_id: "AKIDEXAMPLE",
                secret: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
                unix_ms: TIMES[i % TIMES.len()],
                expires_seconds: EXPIRIES[i % EXPIRIES.len()],
                headers,
            });
        }
    }
}

#[test]
fn access_key_ids_with_punctuation_match() {
    for access_key_id in ["AK+ID=1", "a:b;c,d", "~!@#$%^&*()_+{}|:\"<>?", "Z"] {
        assert_same(&Case {
            method: Method::Get,
            endpoint: "http://127.0.0.1:9000",
            bucket: "b",
            key: "k",
            region: "us-east-1",
            access_key_id,
            secret: "s",
            unix_ms: 1_600_000_000_000,
            expires_seconds: 60,
            headers: &[],
        });
    }
}

#[test]
fn amz_date_matches_jiff() {
    for ms in TIMES
        .iter()
        .copied()
        .chain((0..2000).map(|i| i * (JIFF_MAX_MS / 1999)))
    {
        let t = Timestamp::from_millisecond(ms).unwrap();
        let (day, stamp) = amz_date(ms).unwrap();
        assert_eq!(day, t.strftime("%Y%m%d").to_string());
        assert_eq!(stamp, t.strftime("%Y%m%dT%H%M%SZ").to_string());
    }
}

/// Keys of any characters, weighted towards the ones encoding cares about.
fn key_strategy() -> impl Strategy<Value = String> {
    let interesting = prop::sample::select(vec![
        "/", " ", "+", "=", ":", "%", "?", "#", "&", ";", ",", "~", ".", "-", "_", "*", "'", "(",
        ")", "!", "@", "$", "\\", "\"", "é", "ß", "ファ", "😀", "\u{0}", "\t", "\u{7f}", "\u{a0}",
        "\u{2028}", "a", "Z", "0",
    ]);
    let piece = prop_oneof![
        3 => interesting.prop_map(str::to_owned),
        1 => any::<char>().prop_map(String::from),
        1 => "[a-zA-Z0-9]{1,8}",
    ];
    prop::collection::vec(piece, 1..24)
        .prop_map(|parts| parts.concat())
        .prop_filter("no dot segments", |k| {
            k.len() <= 1024 && !k.split('/').any(|s| s == "." || s == "..")
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn random_requests_match(
        key in key_strategy(),
        method in prop::sample::select(vec![Method::Get, Method::Put, Method::Head, Method::Delete]),
        endpoint in prop::sample::select(ENDPOINTS.to_vec()),
        bucket in "[a-z0-9][a-z0-9.-]{1,40}[a-z0-9]",
        region in prop_oneof![prop::sample::select(REGIONS.to_vec()).prop_map(str::to_owned), "[A-Za-z0-9_-]{1,64}"],
        access_key_id in "[!-.0-~]{1,40}",
        secret in any::<String>(),
        unix_ms in 0..=JIFF_MAX_MS,
        expires_seconds in 1u64..=604_800,
        content_length in any::<u64>(),
        with_headers in any::<bool>(),
    ) {
        let length = content_length.to_string();
        let headers: Vec<(&str, &str)> = if with_headers {
            vec![("x-amz-meta-k", " v  w "), ("content-length", &length)]
        } else {
            vec![]
        };
        let case = Case {
            method,
            endpoint,
            bucket: &bucket,
            key: &key,
            region: &region,
            access_key_id: &access_key_id,
            secret: &secret,
            unix_ms,
            expires_seconds,
            headers: &headers,
        };
        prop_assert_eq!(ours(&case), reference(&case));
    }

    #[test]
    fn random_times_match_jiff(ms in 0..=JIFF_MAX_MS) {
        let t = Timestamp::from_millisecond(ms).unwrap();
        let (day, stamp) = amz_date(ms).unwrap();
        prop_assert_eq!(day, t.strftime("%Y%m%d").to_string());
        prop_assert_eq!(stamp, t.strftime("%Y%m%dT%H%M%SZ").to_string());
    }
}
