//! The host a request names, checked against the host names a server answers to (DNS-rebinding
//! protection), the same way on every transport.

use axum::http::{HeaderMap, Uri, header, uri::Authority};

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
    let authority = match uri.authority() {
        Some(authority) => Some(authority.clone()),
        None => host.and_then(|v| v.to_str().ok()).and_then(|h| h.parse::<Authority>().ok()),
    };
    match authority {
        Some(a) if allowed.iter().any(|h| h.eq_ignore_ascii_case(a.host())) => HostCheck::Allowed,
        _ => HostCheck::NotAllowed,
    }
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
}
