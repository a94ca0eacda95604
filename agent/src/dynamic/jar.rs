//! A session's cookie jar, kept per host: a login service's session cookie goes back to it,
//! not to the API the session calls next. Ports do not part hosts, as browsers have it
//! (RFC 6265 §8.5); `Domain`, `Path` and expiry attributes are not read: a load test's
//! session is short and talks to the hosts it names.

use std::sync::Arc;

/// The cookies a session was set, by host, in the order first set.
#[derive(Debug, Default)]
pub(super) struct Jar {
    cookies: Vec<Cookie>,
}

#[derive(Debug)]
struct Cookie {
    host: Arc<str>,
    name: String,
    value: String,
}

impl Jar {
    /// Sets (or replaces) `name` for `host`.
    pub(super) fn set(&mut self, host: &Arc<str>, name: &str, value: &str) {
        match self
            .cookies
            .iter_mut()
            .find(|c| c.name == name && *c.host == **host)
        {
            Some(c) => value.clone_into(&mut c.value),
            None => self.cookies.push(Cookie {
                host: host.clone(),
                name: name.to_string(),
                value: value.to_string(),
            }),
        }
    }

    /// The cookies to send to `host`, as `(name, value)`.
    pub(super) fn for_host<'a>(
        &'a self,
        host: &'a str,
    ) -> impl Iterator<Item = (&'a str, &'a str)> {
        self.cookies
            .iter()
            .filter(move |c| *c.host == *host)
            .map(|c| (c.name.as_str(), c.value.as_str()))
    }

    /// Whether `host` has a cookie to send.
    pub(super) fn has(&self, host: &str) -> bool {
        self.for_host(host).next().is_some()
    }
}

/// The host a request's `Host` header (or `:authority`) names, lower-cased and without its
/// port: what the jar keys cookies by.
pub(super) fn host_of(authority: &str) -> Arc<str> {
    let host = match authority.parse::<http::uri::Authority>() {
        Ok(a) => a.host().to_string(),
        Err(_) => authority.to_string(),
    };
    host.to_ascii_lowercase().into()
}

#[cfg(test)]
mod tests {
    use super::{host_of, Jar};

    /// Each host gets its own cookies back; a port does not make another host; a cookie set
    /// again replaces its value for that host only.
    #[test]
    fn cookies_go_back_to_the_host_that_set_them() {
        let (auth, api) = (host_of("Auth.example:8080"), host_of("api.example"));
        assert_eq!(&*auth, "auth.example");
        assert_eq!(&*host_of("[::1]:9000"), "[::1]");
        let mut jar = Jar::default();
        jar.set(&auth, "sid", "a1");
        jar.set(&api, "sid", "p1");
        jar.set(&auth, "sid", "a2");
        jar.set(&auth, "theme", "dark");
        let of = |h: &str| {
            jar.for_host(h)
                .map(|(n, v)| format!("{n}={v}"))
                .collect::<Vec<_>>()
        };
        assert_eq!(of("auth.example"), ["sid=a2", "theme=dark"]);
        assert_eq!(of(&host_of("auth.example:9090")), ["sid=a2", "theme=dark"]);
        assert_eq!(of("api.example"), ["sid=p1"]);
        assert!(!jar.has("other.example"));
    }
}
