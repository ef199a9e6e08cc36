//! Odd and hostile inputs: each is refused with the right error, and nothing
//! panics on any input.

use proptest::prelude::*;
use syncular_object_store::{
    amz_date, blob_object_key, checksum_sha256_base64, derive_signing_key, partition_token,
    presign, segment_object_key, validate_prefix, KeyError, Method, PresignError, PresignRequest,
    MAX_UNIX_MS,
};

const T: i64 = 1_700_000_000_000; // 2023-11-14T22:13:20Z
const DAY: &str = "20231114";

fn base() -> PresignRequest<'static> {
    PresignRequest {
        method: Method::Get,
        endpoint: "http://127.0.0.1:9000",
        bucket: "bucket",
        key: "key",
        region: "us-east-1",
        access_key_id: "AKID",
        signing_key: derive_signing_key("secret", DAY, "us-east-1"),
        signing_day: DAY,
        unix_ms: T,
        expires_seconds: 60,
        extra_signed_headers: &[],
    }
}

#[test]
fn the_base_request_is_valid() {
    let signed = presign(&base()).unwrap();
    assert!(signed
        .url
        .starts_with("http://127.0.0.1:9000/bucket/key?X-Amz-Algorithm="));
    assert_eq!(signed.expires_at_ms, T + 60_000);
}

#[test]
fn expiry_bounds() {
    for expires_seconds in [0, 604_801, u64::from(u32::MAX), u64::MAX, 1 << 63] {
        let req = PresignRequest {
            expires_seconds,
            ..base()
        };
        assert_eq!(
            presign(&req),
            Err(PresignError::ExpiresOutOfRange(expires_seconds))
        );
    }
    for expires_seconds in [1, 604_800] {
        let req = PresignRequest {
            expires_seconds,
            ..base()
        };
        let signed = presign(&req).unwrap();
        assert_eq!(
            signed.expires_at_ms,
            T + 1000 * i64::try_from(expires_seconds).unwrap()
        );
        assert!(signed
            .url
            .contains(&format!("&X-Amz-Expires={expires_seconds}&")));
    }
}

#[test]
fn expires_at_counts_from_the_signed_second() {
    let req = PresignRequest {
        unix_ms: T + 999,
        expires_seconds: 10,
        ..base()
    };
    assert_eq!(presign(&req).unwrap().expires_at_ms, T + 10_000);
}

#[test]
fn times_out_of_range() {
    for unix_ms in [-1, -1000, i64::MIN, MAX_UNIX_MS + 1, i64::MAX] {
        let req = PresignRequest { unix_ms, ..base() };
        assert_eq!(presign(&req), Err(PresignError::TimeOutOfRange(unix_ms)));
    }
    // The last representable millisecond signs, with a key for its day.
    let req = PresignRequest {
        unix_ms: MAX_UNIX_MS,
        signing_day: "99991231",
        expires_seconds: 604_800,
        ..base()
    };
    let signed = presign(&req).unwrap();
    assert!(signed.url.contains("X-Amz-Date=99991231T235959Z"));
    assert_eq!(signed.expires_at_ms, (253_402_300_799 + 604_800) * 1000);
}

#[test]
fn the_key_day_must_be_the_request_day() {
    let last_ms_of_day = 1_700_006_399_999; // 2023-11-14T23:59:59.999Z
    assert_eq!(amz_date(last_ms_of_day).unwrap().0, DAY);
    assert!(presign(&PresignRequest {
        unix_ms: last_ms_of_day,
        ..base()
    })
    .is_ok());
    for (unix_ms, signing_day) in [
        (last_ms_of_day + 1, DAY),
        (T, "20231115"),
        (T, ""),
        (T, "2023-11-14"),
        (T, "20231114 "),
        (T, "２０２３１１１４"),
    ] {
        let req = PresignRequest {
            unix_ms,
            signing_day,
            ..base()
        };
        assert!(
            matches!(presign(&req), Err(PresignError::SigningDayMismatch { .. })),
            "{unix_ms} {signing_day:?}"
        );
    }
    let err = presign(&PresignRequest {
        unix_ms: last_ms_of_day + 1,
        ..base()
    })
    .unwrap_err();
    assert_eq!(
        err,
        PresignError::SigningDayMismatch {
            key_day: DAY.into(),
            request_day: "20231115".into()
        }
    );
}

#[test]
fn a_key_for_another_region_or_day_gives_another_signature() {
    let good = presign(&base()).unwrap().url;
    let other_region = PresignRequest {
        signing_key: derive_signing_key("secret", DAY, "eu-west-1"),
        ..base()
    };
    let other_day = PresignRequest {
        signing_key: derive_signing_key("secret", "20231115", "us-east-1"),
        ..base()
    };
    assert_ne!(presign(&other_region).unwrap().url, good);
    assert_ne!(presign(&other_day).unwrap().url, good);
}

#[test]
fn invalid_fields_are_named() {
    type IsExpected = fn(&PresignError) -> bool;
    let cases: Vec<(PresignRequest<'static>, IsExpected)> = vec![
        (
            PresignRequest {
                endpoint: "",
                ..base()
            },
            |e| matches!(e, PresignError::InvalidEndpoint(_)),
        ),
        (
            PresignRequest {
                endpoint: "http://h/prefix",
                ..base()
            },
            |e| matches!(e, PresignError::InvalidEndpoint(_)),
        ),
        (
            PresignRequest {
                endpoint: "http://h/prefix/",
                ..base()
            },
            |e| matches!(e, PresignError::InvalidEndpoint(_)),
        ),
        (
            PresignRequest {
                endpoint: "http://ünï.example",
                ..base()
            },
            |e| matches!(e, PresignError::InvalidEndpoint(_)),
        ),
        (
            PresignRequest {
                bucket: "",
                ..base()
            },
            |e| matches!(e, PresignError::InvalidBucket(_)),
        ),
        (
            PresignRequest {
                bucket: "..",
                ..base()
            },
            |e| matches!(e, PresignError::InvalidBucket(_)),
        ),
        (
            PresignRequest {
                bucket: "a/b",
                ..base()
            },
            |e| matches!(e, PresignError::InvalidBucket(_)),
        ),
        (
            PresignRequest {
                bucket: "bücket",
                ..base()
            },
            |e| matches!(e, PresignError::InvalidBucket(_)),
        ),
        (PresignRequest { key: "", ..base() }, |e| {
            matches!(e, PresignError::InvalidObjectKey(_))
        }),
        (PresignRequest { key: ".", ..base() }, |e| {
            matches!(e, PresignError::InvalidObjectKey(_))
        }),
        (
            PresignRequest {
                key: "a/../b",
                ..base()
            },
            |e| matches!(e, PresignError::InvalidObjectKey(_)),
        ),
        (
            PresignRequest {
                key: "../other-bucket/k",
                ..base()
            },
            |e| matches!(e, PresignError::InvalidObjectKey(_)),
        ),
        (
            PresignRequest {
                key: "a/.",
                ..base()
            },
            |e| matches!(e, PresignError::InvalidObjectKey(_)),
        ),
        (
            PresignRequest {
                region: "",
                ..base()
            },
            |e| *e == PresignError::InvalidRegion,
        ),
        (
            PresignRequest {
                region: "eu-wést-1",
                ..base()
            },
            |e| *e == PresignError::InvalidRegion,
        ),
        (
            PresignRequest {
                region: "us/east",
                ..base()
            },
            |e| *e == PresignError::InvalidRegion,
        ),
        (
            PresignRequest {
                region: "us east",
                ..base()
            },
            |e| *e == PresignError::InvalidRegion,
        ),
        (
            PresignRequest {
                access_key_id: "",
                ..base()
            },
            |e| *e == PresignError::InvalidAccessKeyId,
        ),
        (
            PresignRequest {
                access_key_id: "AK/ID",
                ..base()
            },
            |e| *e == PresignError::InvalidAccessKeyId,
        ),
        (
            PresignRequest {
                access_key_id: "AK ID",
                ..base()
            },
            |e| *e == PresignError::InvalidAccessKeyId,
        ),
        (
            PresignRequest {
                access_key_id: "AKÏD",
                ..base()
            },
            |e| *e == PresignError::InvalidAccessKeyId,
        ),
    ];
    for (req, expected) in cases {
        let err = presign(&req).unwrap_err();
        assert!(expected(&err), "{req:?} gave {err:?}");
        assert!(!err.to_string().is_empty());
    }
    let long_key = "k".repeat(1025);
    let req = PresignRequest {
        key: &long_key,
        ..base()
    };
    assert!(matches!(
        presign(&req),
        Err(PresignError::InvalidObjectKey(_))
    ));
    let long_region = "r".repeat(65);
    let req = PresignRequest {
        region: &long_region,
        ..base()
    };
    assert_eq!(presign(&req), Err(PresignError::InvalidRegion));
}

#[test]
fn invalid_headers_are_named() {
    for headers in [
        &[("host", "evil.example")][..],
        &[("Content-Length", "1")],
        &[("", "1")],
        &[("content length", "1")],
        &[("content-length:", "1")],
        &[("x;y", "1")],
        &[("x-é", "1")],
        &[("content-length", "1"), ("content-length", "2")],
        &[("x-a", "line\nbreak")],
        &[("x-a", "tab\there")],
        &[("x-a", "nul\0")],
        &[("x-a", "ünïcode")],
    ] {
        let req = PresignRequest {
            method: Method::Put,
            extra_signed_headers: headers,
            ..base()
        };
        let err = presign(&req).unwrap_err();
        assert!(
            matches!(err, PresignError::InvalidHeader { .. }),
            "{headers:?} gave {err:?}"
        );
        assert!(err.to_string().contains("invalid signed header"));
    }
}

#[test]
fn signed_headers_are_listed_sorted_with_host() {
    let req = PresignRequest {
        method: Method::Put,
        extra_signed_headers: &[("x-amz-checksum-sha256", "abc="), ("content-length", "5")],
        ..base()
    };
    let url = presign(&req).unwrap().url;
    assert!(
        url.contains("&X-Amz-SignedHeaders=content-length%3Bhost%3Bx-amz-checksum-sha256&"),
        "{url}"
    );
    let mut reversed = req;
    reversed.extra_signed_headers = &[("content-length", "5"), ("x-amz-checksum-sha256", "abc=")];
    assert_eq!(presign(&reversed).unwrap().url, url);
    let other_length = PresignRequest {
        extra_signed_headers: &[("content-length", "6"), ("x-amz-checksum-sha256", "abc=")],
        ..req
    };
    assert_ne!(presign(&other_length).unwrap().url, url);
}

#[test]
fn error_messages_say_what_is_wrong() {
    let messages = [
        PresignError::UnsupportedMethod("POST".into()).to_string(),
        PresignError::ExpiresOutOfRange(0).to_string(),
        PresignError::TimeOutOfRange(-1).to_string(),
        PresignError::SigningDayMismatch {
            key_day: "20240101".into(),
            request_day: "20240102".into(),
        }
        .to_string(),
        KeyError::InvalidContentId.to_string(),
        KeyError::InvalidPrefix("it starts with '/'").to_string(),
    ];
    assert!(messages[0].contains("POST") && messages[0].contains("GET"));
    assert!(messages[1].contains("604800"));
    assert!(messages[2].contains("-1"));
    assert!(messages[3].contains("20240101") && messages[3].contains("20240102"));
    assert!(messages[4].contains("sha256:"));
    assert!(messages[5].contains("starts with '/'"));
    let boxed: Box<dyn std::error::Error> = Box::new(PresignError::InvalidRegion);
    assert!(boxed.to_string().contains("region"));
}

#[test]
fn derive_signing_key_takes_anything() {
    for (secret, day, region) in [
        ("", "", ""),
        ("é\0", "not a day", "régïon"),
        ("s", "20240101", "us-east-1"),
    ] {
        let a = derive_signing_key(secret, day, region);
        assert_eq!(a, derive_signing_key(secret, day, region));
    }
    let long = "x".repeat(100_000);
    let _ = derive_signing_key(&long, &long, &long);
}

fn any_method() -> impl Strategy<Value = Method> {
    prop::sample::select(vec![Method::Get, Method::Put, Method::Head, Method::Delete])
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// No input makes `presign` panic; when it signs, the URL has its shape.
    #[test]
    fn presign_never_panics(
        method in any_method(),
        endpoint in prop_oneof![4 => Just("http://127.0.0.1:9000".to_owned()), 1 => any::<String>(), 1 => "(https?|HTTP)://[a-zA-Z0-9.:\\[\\]@/_-]{0,20}"],
        bucket in prop_oneof![4 => Just("b".to_owned()), 1 => any::<String>()],
        key in prop_oneof![4 => "[a-z/]{1,10}", 1 => any::<String>()],
        region in prop_oneof![4 => Just("us-east-1".to_owned()), 1 => any::<String>()],
        access_key_id in prop_oneof![4 => Just("AK".to_owned()), 1 => any::<String>()],
        signing_day in prop_oneof![4 => Just(DAY.to_owned()), 1 => any::<String>()],
        unix_ms in prop_oneof![4 => Just(T), 1 => any::<i64>()],
        expires_seconds in prop_oneof![4 => 1u64..=604_800, 1 => any::<u64>()],
        name in prop_oneof![4 => Just("content-length".to_owned()), 1 => any::<String>()],
        value in prop_oneof![4 => "[ -~]{0,12}", 1 => any::<String>()],
        signing_key in any::<[u8; 32]>(),
    ) {
        let headers = [(name.as_str(), value.as_str())];
        let req = PresignRequest {
            method,
            endpoint: &endpoint,
            bucket: &bucket,
            key: &key,
            region: &region,
            access_key_id: &access_key_id,
            signing_key,
            signing_day: &signing_day,
            unix_ms,
            expires_seconds,
            extra_signed_headers: &headers,
        };
        match presign(&req) {
            Ok(signed) => {
                prop_assert!(signed.url.starts_with("http"));
                prop_assert!(signed.url.is_ascii());
                prop_assert!(signed.url.contains("&X-Amz-Signature="));
                prop_assert!(signed.expires_at_ms > unix_ms - 1000);
            }
            Err(e) => prop_assert!(!e.to_string().is_empty()),
        }
    }

    #[test]
    fn key_functions_never_panic(
        prefix in any::<String>(),
        id in prop_oneof![any::<String>(), "sha256:[0-9a-fA-F]{62,66}"],
        token in prop_oneof![any::<String>(), "[0-9a-fA-F]{31,33}"],
        salt in any::<Vec<u8>>(),
        partition in any::<String>(),
        ms in any::<i64>(),
    ) {
        let _ = validate_prefix(&prefix);
        let _ = segment_object_key(&prefix, &id);
        let _ = blob_object_key(&prefix, &token, &id);
        let _ = checksum_sha256_base64(id.strip_prefix("sha256:").unwrap_or(&id));
        let _ = amz_date(ms);
        prop_assert_eq!(partition_token(&salt, &partition).len(), 32);
    }

    /// Valid ids under valid prefixes always make a key of the documented shape.
    #[test]
    fn valid_layouts(
        prefix in "([A-Za-z0-9!_*'()-][A-Za-z0-9!_.*'()-]{0,8}/){0,4}",
        hex in "[0-9a-f]{64}",
        partition in any::<String>(),
    ) {
        let id = format!("sha256:{hex}");
        prop_assert_eq!(segment_object_key(&prefix, &id).unwrap(), format!("{prefix}seg/sha256/{hex}"));
        let token = partition_token(b"deployment salt", &partition);
        prop_assert_eq!(
            blob_object_key(&prefix, &token, &id).unwrap(),
            format!("{prefix}blob/{token}/sha256/{hex}")
        );
        prop_assert_eq!(checksum_sha256_base64(&hex).unwrap().len(), 44);
    }
}
