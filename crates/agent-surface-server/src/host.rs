//! The host a request names, checked against the host names a server answers to (DNS-rebinding
//! protection), the same way on every transport.

use axum::http::{HeaderMap, Uri, header};

/// What [`check_host`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostCheck {
    /// The request names an allowed host (or every host is allowed).
    Allowed,
    /// The request names another host, or none that parses.
    NotAllowed,
    /// The request carries more than one `Host` field (RFC 9112 §3.2: a bad request).
    Repeated,
}

/// Checks the host a request names — the authority of an absolute-form target (RFC 9112
/// §3.2.2), else its one `Host` header — against `allowed` (compared without the port and
/// case-insensitively; an IPv6 literal in brackets, `[::1]`). An empty `allowed` admits every
/// host; more than one `Host` field is [`HostCheck::Repeated`] whatever `allowed` holds.
///
/// ```
/// use agent_surface_server::{HostCheck, check_host};
/// let mut headers = axum::http::HeaderMap::new();
/// headers.insert("host", "Shop.Example:8443".parse().unwrap());
/// let uri: axum::http::Uri = "/mcp".parse().unwrap();
/// assert_eq!(check_host(&["shop.example".into()], &uri, &headers), HostCheck::Allowed);
/// assert_eq!(check_host(&["localhost".into()], &uri, &headers), HostCheck::NotAllowed);
/// assert_eq!(check_host(&[], &uri, &headers), HostCheck::Allowed);
/// ```
pub fn check_host(allowed: &[String], uri: &Uri, headers: &HeaderMap) -> HostCheck {
    let mut fields = headers.get_all(header::HOST).iter();
    let host = fields.next();
    if fields.next().is_some() {
        return HostCheck::Repeated;
    }
    if allowed.is_empty() {
        return HostCheck::Allowed;
    }
    let named = match uri.authority() {
        Some(authority) => Some(authority.host()),
        None => host.and_then(|v| host_of(v.as_bytes())),
    };
    match named {
        Some(named) if allowed.iter().any(|h| h.eq_ignore_ascii_case(named)) => HostCheck::Allowed,
        _ => HostCheck::NotAllowed,
    }
}

/// The host of a `Host` field's value (RFC 9110 §7.2: `uri-host [ ":" port ]`), borrowed from it:
/// an IPv6 literal with its brackets, or a name or IPv4 address, without the port. `None` for a
/// value that is not of that form (user information, a port that is not a number below 65,536,
/// characters a host never holds), which no allowed host matches. Parsed in place, where
/// `Authority` would copy the value on every request.
fn host_of(value: &[u8]) -> Option<&str> {
    let value = std::str::from_utf8(value).ok()?;
    let (host, port) = if value.starts_with('[') {
        let end = value.find(']')?;
        (&value[..=end], &value[end + 1..])
    } else {
        value.find(':').map_or((value, ""), |at| (&value[..at], &value[at..]))
    };
    let port_ok = match port.strip_prefix(':') {
        Some(digits) => {
            digits.is_empty() || (digits.bytes().all(|b| b.is_ascii_digit()) && digits.parse::<u16>().is_ok())
        }
        None => port.is_empty(),
    };
    let host_ok = !host.is_empty()
        && host.bytes().all(|b| b.is_ascii_alphanumeric() || b"-._~%!$&'()*+,;=[]:".contains(&b))
        && (host.starts_with('[') || !host.contains([':', '[', ']']));
    (port_ok && host_ok).then_some(host)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(allowed: &[&str], target: &str, hosts: &[&str]) -> HostCheck {
        let mut headers = HeaderMap::new();
        for h in hosts {
            headers.append(header::HOST, h.parse().unwrap());
        }
        let allowed: Vec<String> = allowed.iter().map(|h| (*h).to_string()).collect();
        check_host(&allowed, &target.parse().unwrap(), &headers)
    }

    #[test]
    fn hosts_are_compared_without_port_or_case() {
        assert_eq!(check(&["localhost"], "/", &["LOCALHOST:8080"]), HostCheck::Allowed);
        assert_eq!(check(&["[::1]"], "/", &["[::1]:1"]), HostCheck::Allowed);
        assert_eq!(check(&["localhost"], "/", &["evil.example"]), HostCheck::NotAllowed);
        assert_eq!(check(&["localhost"], "/", &[]), HostCheck::NotAllowed, "no Host at all");
        assert_eq!(check(&["localhost"], "/", &["not a host"]), HostCheck::NotAllowed);
        // An absolute-form target's authority is the host, whatever the header says.
        assert_eq!(check(&["localhost"], "http://evil.example/", &["localhost"]), HostCheck::NotAllowed);
        assert_eq!(check(&["localhost", "x"], "/", &["localhost", "x"]), HostCheck::Repeated);
        assert_eq!(check(&[], "/", &["a", "b"]), HostCheck::Repeated);
    }

    /// A `Host` value that is not `host[:port]` names no allowed host: user information, a port
    /// that is not a number below 65,536, a second colon, an unclosed IPv6 literal, no host.
    #[test]
    fn a_host_field_of_another_form_is_not_allowed() {
        for bad in [
            "alice@localhost",
            "localhost:abc",
            "localhost:65536",
            "localhost:80:80",
            "[::1",
            "[::1]x",
            ":8080",
            "local host",
            "localhost/x",
            "",
        ] {
            assert_eq!(check(&["localhost", "[::1]"], "/", &[bad]), HostCheck::NotAllowed, "{bad:?}");
        }
        for good in ["localhost", "localhost:", "localhost:65535", "LocalHost:1", "[::1]", "[::1]:8080"] {
            assert_eq!(check(&["localhost", "[::1]"], "/", &[good]), HostCheck::Allowed, "{good:?}");
        }
    }
}
