//! The S3 endpoint: `http[s]://host[:port]` parsed and normalized the way a
//! WHATWG URL serializer writes it (lowercase scheme and host, no default port,
//! canonical IPv6), so the signed `host` header is the one HTTP clients send.

use std::net::Ipv6Addr;

use crate::error::PresignError;

/// A parsed endpoint: the origin URLs are built on and the `host` header value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Endpoint {
    /// `http://host[:port]` or `https://host[:port]`, no trailing `/`.
    pub(crate) origin: String,
    /// `host[:port]`, the port only when it is not the scheme's default.
    pub(crate) host_header: String,
}

type Result<T> = std::result::Result<T, PresignError>;

fn invalid(why: &'static str) -> PresignError {
    PresignError::InvalidEndpoint(why)
}

impl Endpoint {
    /// Parses `http[s]://host[:port]`, optionally followed by a single `/`.
    ///
    /// The host is a DNS name (letters, digits, `-` and `.`, lowercased), a
    /// dotted-quad IPv4 address, or a bracketed IPv6 address. Paths, queries,
    /// fragments, credentials, empty or zero ports and numeric hosts that are
    /// not a canonical dotted quad (`127.1`, `0x7f.0.0.1`) are rejected.
    pub(crate) fn parse(endpoint: &str) -> Result<Self> {
        let (scheme, default_port, rest) = split_scheme(endpoint)?;
        let authority = match rest.find(['/', '?', '#', '\\']) {
            None => rest,
            Some(end) => {
                if rest.get(end..) != Some("/") {
                    return Err(invalid("it has a path, a query or a fragment"));
                }
                rest.get(..end).unwrap_or_default()
            }
        };
        if authority.contains('@') {
            return Err(invalid("it has credentials"));
        }
        let (host, port) = split_port(authority)?;
        let host = normalize_host(host)?;
        let host_header = match port {
            Some(p) if p != default_port => format!("{host}:{p}"),
            _ => host,
        };
        Ok(Self {
            origin: format!("{scheme}://{host_header}"),
            host_header,
        })
    }
}

/// The lowercase scheme, its default port and what follows `://`.
fn split_scheme(endpoint: &str) -> Result<(&'static str, u16, &str)> {
    for (scheme, port) in [("https", 443), ("http", 80)] {
        let Some(head) = endpoint.get(..scheme.len() + 3) else {
            continue;
        };
        if head.eq_ignore_ascii_case(&format!("{scheme}://")) {
            let rest = endpoint.get(scheme.len() + 3..).unwrap_or_default();
            return Ok((scheme, port, rest));
        }
    }
    Err(invalid("the scheme is not http:// or https://"))
}

/// The host (brackets kept for IPv6) and the port, if any.
fn split_port(authority: &str) -> Result<(&str, Option<u16>)> {
    let (host, port) = if authority.starts_with('[') {
        match authority.find(']') {
            Some(close) => {
                let host = authority.get(..=close).unwrap_or_default();
                match authority.get(close + 1..).unwrap_or_default() {
                    "" => (host, None),
                    after => match after.strip_prefix(':') {
                        Some(port) => (host, Some(port)),
                        None => return Err(invalid("unexpected characters after the IPv6 host")),
                    },
                }
            }
            None => return Err(invalid("an IPv6 host lacks its closing ']'")),
        }
    } else {
        match authority.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        }
    };
    let port = match port {
        None => None,
        Some(digits) => {
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return Err(invalid("the port is not a number"));
            }
            match digits.parse::<u16>() {
                Ok(0) | Err(_) => return Err(invalid("the port is not in 1..=65535")),
                Ok(p) => Some(p),
            }
        }
    };
    Ok((host, port))
}

/// The host as a WHATWG URL serializes it.
fn normalize_host(host: &str) -> Result<String> {
    if host.is_empty() {
        return Err(invalid("the host is empty"));
    }
    if let Some(inner) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        let addr: Ipv6Addr = inner
            .parse()
            .map_err(|_| invalid("the IPv6 host is not a valid address"))?;
        return Ok(format!("[{}]", ipv6_text(&addr)));
    }
    if host.len() > 253 {
        return Err(invalid("the host is longer than 253 characters"));
    }
    let host = host.to_ascii_lowercase();
    let labels: Vec<&str> = host.split('.').collect();
    if labels.iter().any(|l| l.is_empty()) {
        return Err(invalid("the host has an empty label"));
    }
    if !host
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
    {
        return Err(invalid(
            "the host has a character other than letters, digits, '-' and '.'",
        ));
    }
    // A host whose last label is numeric is an IPv4 address to URL parsers,
    // which accept (and rewrite) forms like `127.1` or `010.0.0.1`: only the
    // canonical dotted quad is taken, so the signed host is the one sent.
    let last = labels.last().copied().unwrap_or_default();
    if last.bytes().all(|b| b.is_ascii_digit()) || last.starts_with("0x") {
        let canonical = labels.len() == 4
            && labels.iter().all(|l| {
                l.len() <= 3
                    && l.bytes().all(|b| b.is_ascii_digit())
                    && (l.len() == 1 || !l.starts_with('0'))
                    && l.parse::<u16>().is_ok_and(|n| n <= 255)
            });
        if !canonical {
            return Err(invalid(
                "a numeric host must be a dotted-quad IPv4 address like 127.0.0.1",
            ));
        }
    }
    Ok(host)
}

/// An IPv6 address in the WHATWG URL form: lowercase hex pieces without
/// leading zeros, the first longest run of two or more zero pieces written
/// `::`, and no embedded IPv4 notation.
fn ipv6_text(addr: &Ipv6Addr) -> String {
    let pieces = addr.segments();
    // (start, len) of the first longest run of zero pieces.
    let mut best = (0, 0);
    let mut run_start = None;
    for (i, &p) in pieces.iter().enumerate() {
        match (p, run_start) {
            (0, None) => run_start = Some(i),
            (0, Some(_)) => {}
            (_, Some(start)) => {
                if i - start > best.1 {
                    best = (start, i - start);
                }
                run_start = None;
            }
            (_, None) => {}
        }
    }
    if let Some(start) = run_start {
        if pieces.len() - start > best.1 {
            best = (start, pieces.len() - start);
        }
    }
    let mut out = String::new();
    let mut i = 0;
    while i < pieces.len() {
        if best.1 >= 2 && i == best.0 {
            out.push_str(if i == 0 { "::" } else { ":" });
            i += best.1;
            continue;
        }
        out.push_str(&format!("{:x}", pieces.get(i).copied().unwrap_or_default()));
        if i + 1 < pieces.len() {
            out.push(':');
        }
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(endpoint: &str) -> (String, String) {
        let e = Endpoint::parse(endpoint).unwrap_or_else(|e| panic!("{endpoint}: {e}"));
        (e.origin, e.host_header)
    }

    #[test]
    fn accepted_forms() {
        assert_eq!(
            ok("http://127.0.0.1:9000"),
            ("http://127.0.0.1:9000".into(), "127.0.0.1:9000".into())
        );
        assert_eq!(
            ok("https://s3.eu-west-1.amazonaws.com/"),
            (
                "https://s3.eu-west-1.amazonaws.com".into(),
                "s3.eu-west-1.amazonaws.com".into()
            )
        );
        assert_eq!(
            ok("HTTP://MinIO.Local:80"),
            ("http://minio.local".into(), "minio.local".into())
        );
        assert_eq!(ok("https://h:443"), ("https://h".into(), "h".into()));
        assert_eq!(ok("https://h:80"), ("https://h:80".into(), "h:80".into()));
        assert_eq!(ok("http://h:09000").1, "h:9000");
        assert_eq!(ok("http://[::1]:9000").1, "[::1]:9000");
        assert_eq!(ok("http://[0:0:0:0:0:0:0:1]").1, "[::1]");
        assert_eq!(ok("http://[2001:DB8:0:0:1:0:0:1]").1, "[2001:db8::1:0:0:1]");
        assert_eq!(
            ok("http://[2001:db8:0:1:1:1:1:1]").1,
            "[2001:db8:0:1:1:1:1:1]"
        );
        assert_eq!(ok("http://[::ffff:1.2.3.4]").1, "[::ffff:102:304]");
        assert_eq!(ok("http://[1::]").1, "[1::]");
        assert_eq!(ok("http://[::]").1, "[::]");
        assert_eq!(ok("http://10.0.0.255").1, "10.0.0.255");
        assert_eq!(ok("http://s3.1a").1, "s3.1a");
    }

    #[test]
    fn rejected_forms() {
        for bad in [
            "",
            "127.0.0.1:9000",
            "ftp://h",
            "http:/h",
            "http://",
            "http://:9000",
            "http://h/path",
            "http://h//",
            "http://h?x=1",
            "http://h#f",
            "http://h\\",
            "http://user:pw@h",
            "http://h:",
            "http://h:0",
            "http://h:65536",
            "http://h:9x",
            "http://h:-1",
            "http://h:1:2",
            "http://h..com",
            "http://.h",
            "http://h.",
            "http://h_1",
            "http://h é",
            "http://hé",
            "http://127.1",
            "http://010.0.0.1",
            "http://256.0.0.1",
            "http://0x7f.0.0.1",
            "http://1.2.3.4.5",
            "http://[::1",
            "http://[::1]x",
            "http://[fe80::1%25eth0]",
            "http://[1.2.3.4]",
        ] {
            assert!(
                matches!(Endpoint::parse(bad), Err(PresignError::InvalidEndpoint(_))),
                "{bad:?} was accepted"
            );
        }
    }
}
