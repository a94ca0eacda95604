//! Request routing: the route a path names (also the `route` metric label) and query values.

use super::ws;

/// The value of `key` in a query string: `Ok(None)` if absent, `Err` if not a `u64`.
/// The last occurrence wins.
pub(super) fn query_u64(query: Option<&str>, key: &str) -> Result<Option<u64>, ()> {
    query_str(query, key)
        .map(|v| v.parse::<u64>().map_err(|_| ()))
        .transpose()
}

/// The value of `key` in a query string, if present (a bare `key` is the empty value); the
/// last occurrence wins.
pub(super) fn query_str<'q>(query: Option<&'q str>, key: &str) -> Option<&'q str> {
    query
        .unwrap_or("")
        .rsplit('&')
        .map(|pair| pair.split_once('=').unwrap_or((pair, "")))
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v)
}

/// Routes, as used in the `route` metric label.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Route {
    Root,
    Work,
    Delay,
    Bytes,
    Echo,
    Data,
    Metrics,
    Healthz,
    Readyz,
    Sse,
    Chunks,
    Ws,
    WsBroadcast,
}

impl Route {
    pub(super) const ALL: [Route; 13] = [
        Route::Root,
        Route::Work,
        Route::Delay,
        Route::Bytes,
        Route::Echo,
        Route::Data,
        Route::Metrics,
        Route::Healthz,
        Route::Readyz,
        Route::Sse,
        Route::Chunks,
        Route::Ws,
        Route::WsBroadcast,
    ];

    pub(super) fn of(path: &str) -> Self {
        match path {
            "/" => Self::Root,
            "/work" => Self::Work,
            "/delay" => Self::Delay,
            "/bytes" => Self::Bytes,
            "/echo" => Self::Echo,
            "/metrics" => Self::Metrics,
            "/healthz" => Self::Healthz,
            "/readyz" => Self::Readyz,
            "/sse" => Self::Sse,
            "/chunks" => Self::Chunks,
            "/ws" => Self::Ws,
            "/ws/broadcast" => Self::WsBroadcast,
            _ => Self::Data,
        }
    }

    pub(super) fn as_str(self) -> &'static str {
        match self {
            Self::Root => "root",
            Self::Work => "work",
            Self::Delay => "delay",
            Self::Bytes => "bytes",
            Self::Echo => "echo",
            Self::Data => "data",
            Self::Metrics => "metrics",
            Self::Healthz => "healthz",
            Self::Readyz => "readyz",
            Self::Sse => "sse",
            Self::Chunks => "chunks",
            Self::Ws => "ws",
            Self::WsBroadcast => "ws_broadcast",
        }
    }

    pub(super) fn index(self) -> usize {
        self as usize
    }

    pub(super) fn websocket(self) -> Option<ws::WsRoute> {
        match self {
            Self::Ws => Some(ws::WsRoute::Echo),
            Self::WsBroadcast => Some(ws::WsRoute::Broadcast),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_values() {
        assert_eq!(query_u64(None, "ms"), Ok(None));
        assert_eq!(query_u64(Some("ms=5"), "ms"), Ok(Some(5)));
        assert_eq!(query_u64(Some("a=1&ms=5&ms=7"), "ms"), Ok(Some(7)));
        assert_eq!(query_u64(Some("msx=5"), "ms"), Ok(None));
        assert_eq!(query_u64(Some("ms=-1"), "ms"), Err(()));
        assert_eq!(query_u64(Some("ms="), "ms"), Err(()));
        assert_eq!(query_u64(Some("ms"), "ms"), Err(()));
        assert_eq!(query_u64(Some("ms=99999999999999999999999"), "ms"), Err(()));
        assert_eq!(query_str(Some("ms=5&clock=wall"), "clock"), Some("wall"));
        assert_eq!(query_str(Some("clock"), "clock"), Some(""));
        assert_eq!(query_str(Some("ms=5"), "clock"), None);
    }

    #[test]
    fn routes_round_trip() {
        for r in Route::ALL {
            assert_eq!(Route::ALL[r.index()], r);
        }
        assert_eq!(Route::of("/anything"), Route::Data);
        assert_eq!(Route::of("/data"), Route::Data);
    }
}
