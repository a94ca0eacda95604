//! Compressed HTTP bodies (`content-encoding: gzip`, `deflate`, `br`), decoded before a step's
//! checks and extraction read them. Bounded: a body that decodes past [`MAX_DECODED_BODY`] (a
//! decompression bomb) stops there and counts `decode_limit` instead of filling the agent's
//! memory.

use std::io::Read;

use stampede_core::stats::error_kind;

/// Most bytes a compressed body may decode to: the same cap as a captured body, since the
/// checks and extraction read no more (`docs/scenario.md`, "Compressed bodies").
pub(crate) const MAX_DECODED_BODY: usize = stampede_core::extract::MAX_CAPTURED_BODY;

/// The content codings the agent decodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Coding {
    Gzip,
    /// HTTP's `deflate`: zlib-wrapped, or raw deflate as some servers send it.
    Deflate,
    Brotli,
}

/// The coding named by the `content-encoding` header among `headers` (lower-case names):
/// `None` for none or `identity`, `decode` for one the agent does not know (several stacked
/// codings included).
pub(crate) fn coding(headers: &[(String, Vec<u8>)]) -> Result<Option<Coding>, &'static str> {
    let Some((_, value)) = headers.iter().find(|(n, _)| n == "content-encoding") else {
        return Ok(None);
    };
    let value = std::str::from_utf8(value).map_err(|_| error_kind::DECODE)?;
    match value.trim().to_ascii_lowercase().as_str() {
        "" | "identity" => Ok(None),
        "gzip" | "x-gzip" => Ok(Some(Coding::Gzip)),
        "deflate" => Ok(Some(Coding::Deflate)),
        "br" => Ok(Some(Coding::Brotli)),
        _ => Err(error_kind::DECODE),
    }
}

/// Decodes `body` into `out` (cleared first), at most `cap` bytes; the error kind when the
/// body does not decode or decodes past `cap`.
pub(crate) fn decode(
    coding: Coding,
    body: &[u8],
    out: &mut Vec<u8>,
    cap: usize,
) -> Result<(), &'static str> {
    let run = |r: &mut dyn Read, out: &mut Vec<u8>| {
        out.clear();
        // One byte past the cap tells a body of exactly `cap` from a longer one.
        let limit = u64::try_from(cap).unwrap_or(u64::MAX).saturating_add(1);
        r.take(limit).read_to_end(out)
    };
    let read = match coding {
        Coding::Gzip => run(&mut flate2::read::MultiGzDecoder::new(body), out),
        Coding::Deflate => run(&mut flate2::read::ZlibDecoder::new(body), out)
            .or_else(|_| run(&mut flate2::read::DeflateDecoder::new(body), out)),
        Coding::Brotli => run(
            &mut brotli_decompressor::Decompressor::new(body, 16 * 1024),
            out,
        ),
    };
    match read {
        Err(_) => Err(error_kind::DECODE),
        Ok(_) if out.len() > cap => Err(error_kind::DECODE_LIMIT),
        Ok(_) => Ok(()),
    }
}

/// Decodes a captured body in place when its headers name a coding; the error kind when it
/// cannot be decoded. Returns the decoded size (`None`: the body was not encoded).
pub(crate) fn decode_capture(
    capture: &mut crate::http1::Capture,
    cap: usize,
) -> Result<Option<u64>, &'static str> {
    let Some(c) = coding(&capture.headers)? else {
        return Ok(None);
    };
    let mut out = Vec::new();
    decode(c, &capture.body, &mut out, cap)?;
    capture.body = out;
    Ok(Some(capture.body.len() as u64))
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    fn gzip(data: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    fn headers(coding: &str) -> Vec<(String, Vec<u8>)> {
        vec![("content-encoding".into(), coding.as_bytes().to_vec())]
    }

    #[test]
    fn gzip_deflate_and_brotli_decode_to_the_original() {
        let text = br#"{"status":"ok","items":[1,2,3]}"#.repeat(50);
        let mut zlib = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
        zlib.write_all(&text).unwrap();
        let mut raw = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::fast());
        raw.write_all(&text).unwrap();
        let mut br = Vec::new();
        brotli::BrotliCompress(&mut &text[..], &mut br, &Default::default()).unwrap();
        let cases = [
            (Coding::Gzip, gzip(&text)),
            (Coding::Deflate, zlib.finish().unwrap()),
            (Coding::Deflate, raw.finish().unwrap()),
            (Coding::Brotli, br),
        ];
        for (c, body) in cases {
            assert!(body.len() < text.len() / 4, "{c:?} compresses");
            let mut out = vec![1, 2, 3];
            decode(c, &body, &mut out, MAX_DECODED_BODY).unwrap();
            assert_eq!(out, text, "{c:?}");
        }
    }

    #[test]
    fn a_bomb_stops_at_the_cap_and_garbage_is_a_decode_error() {
        // 64 MiB of zeros compress to about 64 KiB.
        let bomb = {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
            let zeros = vec![0u8; 1 << 20];
            for _ in 0..64 {
                e.write_all(&zeros).unwrap();
            }
            e.finish().unwrap()
        };
        assert!(bomb.len() < 1 << 17, "{}", bomb.len());
        let mut out = Vec::new();
        assert_eq!(
            decode(Coding::Gzip, &bomb, &mut out, MAX_DECODED_BODY),
            Err(error_kind::DECODE_LIMIT)
        );
        assert_eq!(
            out.len(),
            MAX_DECODED_BODY + 1,
            "reading stopped at the cap"
        );
        // Exactly the cap passes.
        let full = gzip(&vec![7u8; MAX_DECODED_BODY]);
        decode(Coding::Gzip, &full, &mut out, MAX_DECODED_BODY).unwrap();
        assert_eq!(out.len(), MAX_DECODED_BODY);
        for c in [Coding::Gzip, Coding::Deflate, Coding::Brotli] {
            assert_eq!(
                decode(c, b"not compressed at all", &mut out, 1024),
                Err(error_kind::DECODE),
                "{c:?}"
            );
        }
        let cut = gzip(b"hello hello hello hello");
        assert_eq!(
            decode(Coding::Gzip, &cut[..cut.len() / 2], &mut out, 1024),
            Err(error_kind::DECODE)
        );
    }

    #[test]
    fn the_header_names_the_coding() {
        assert_eq!(coding(&[]), Ok(None));
        assert_eq!(coding(&headers("identity")), Ok(None));
        assert_eq!(coding(&headers(" GZIP ")), Ok(Some(Coding::Gzip)));
        assert_eq!(coding(&headers("br")), Ok(Some(Coding::Brotli)));
        assert_eq!(coding(&headers("deflate")), Ok(Some(Coding::Deflate)));
        assert_eq!(coding(&headers("zstd")), Err(error_kind::DECODE));
        assert_eq!(coding(&headers("gzip, br")), Err(error_kind::DECODE));
        let mut c = crate::http1::Capture {
            headers: headers("gzip"),
            body: gzip(b"{\"a\":1}"),
            limit: 1024,
        };
        assert_eq!(decode_capture(&mut c, 1024), Ok(Some(7)));
        assert_eq!(c.body, b"{\"a\":1}");
    }
}
