//! `--gzip`: answers compressed with gzip when the request accepts it, so a load generator's
//! decoding is tested against real compressed bodies. Successful bodies of at most
//! [`MAX_GZIP_BODY`] bytes are compressed; a paced stream never is.

use std::io::Write;

use bytes::Bytes;
use hyper::header::{HeaderMap, HeaderValue, ACCEPT_ENCODING, CONTENT_ENCODING, VARY};
use hyper::Response;

use super::body::Body;

/// Largest body compressed (larger ones are sent as they are): room for a test's
/// decompression bomb, a few MiB that compress to a few KiB.
pub(super) const MAX_GZIP_BODY: u64 = 64 << 20;

/// Whether `accept-encoding` lists `gzip` (or `*`) without `q=0`.
pub(super) fn accepted(headers: &HeaderMap) -> bool {
    headers
        .get_all(ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|item| {
            let mut parts = item.split(';').map(str::trim);
            let coding = parts.next().unwrap_or_default();
            let refused = parts.any(|p| {
                p.strip_prefix("q=")
                    .and_then(|q| q.parse::<f32>().ok())
                    .is_some_and(|q| q == 0.0)
            });
            (coding.eq_ignore_ascii_case("gzip") || coding == "*") && !refused
        })
}

/// `resp` with its body gzipped, when it is a successful, non-empty, exact-length body of at
/// most [`MAX_GZIP_BODY`] bytes; otherwise `resp` unchanged.
pub(super) fn compress(resp: Response<Body>) -> Response<Body> {
    let fits = resp.status().is_success()
        && !resp.headers().contains_key(CONTENT_ENCODING)
        && (1..=MAX_GZIP_BODY).contains(&resp.body().len());
    if !fits {
        return resp;
    }
    let (mut parts, body) = resp.into_parts();
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let written = match body {
        Body::Full(Some(b)) => e.write_all(&b),
        Body::Repeat { chunk, remaining } => {
            let mut left = remaining;
            let mut r = Ok(());
            while left > 0 && r.is_ok() {
                let n = usize::try_from(left).unwrap_or(usize::MAX).min(chunk.len());
                r = e.write_all(&chunk[..n]);
                left -= n as u64;
            }
            r
        }
        other => return Response::from_parts(parts, other),
    };
    let Ok(gz) = written.and_then(|()| e.finish()) else {
        return Response::from_parts(parts, Body::Full(None));
    };
    parts
        .headers
        .insert(CONTENT_ENCODING, HeaderValue::from_static("gzip"));
    parts
        .headers
        .insert(VARY, HeaderValue::from_static("accept-encoding"));
    Response::from_parts(parts, Body::full(Bytes::from(gz)))
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::*;

    #[test]
    fn accept_encoding_is_read_with_its_weights() {
        let h = |v: &str| {
            let mut m = HeaderMap::new();
            m.insert(ACCEPT_ENCODING, HeaderValue::from_str(v).unwrap());
            m
        };
        assert!(accepted(&h("gzip")));
        assert!(accepted(&h("br, GZIP;q=0.5")));
        assert!(accepted(&h("*")));
        assert!(!accepted(&h("gzip;q=0")));
        assert!(!accepted(&h("br, deflate")));
        assert!(!accepted(&HeaderMap::new()));
    }

    #[test]
    fn a_repeated_body_is_gzipped_whole() {
        let pattern = Bytes::from_static(b"abcdefghijklmnopqrstuvwxyz");
        let resp = compress(Response::new(Body::repeat(&pattern, 1000)));
        assert_eq!(resp.headers()[CONTENT_ENCODING], "gzip");
        let Body::Full(Some(gz)) = resp.into_body() else {
            panic!("not a full body")
        };
        assert!(gz.len() < 200, "{}", gz.len());
        let mut out = String::new();
        flate2::read::GzDecoder::new(&gz[..])
            .read_to_string(&mut out)
            .unwrap();
        assert_eq!(out.len(), 1000);
        assert!(out.starts_with("abcdefghijklmnopqrstuvwxyzabc"));
        let empty = compress(Response::new(Body::Full(None)));
        assert!(!empty.headers().contains_key(CONTENT_ENCODING));
    }
}
