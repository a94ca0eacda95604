//! Histogram decoding on untrusted bytes: `decode_sparse` is what the controller runs on every
//! histogram an agent sends; `decode` (dense) reads the histograms of report files. Neither
//! may panic. When both accept the bytes they must agree, and what they accept must encode
//! and decode back to the same counts.

#![no_main]

use libfuzzer_sys::fuzz_target;
use stampede_core::hist::{self, SparseHist};

fuzz_target!(|data: &[u8]| {
    let sparse = hist::decode_sparse(data);
    let dense = hist::decode(data);
    if let Ok(s) = &sparse {
        // What the controller does with it next: merge, percentiles, encode for the report.
        let mut merged = SparseHist::default();
        merged.add(s);
        merged.add(s);
        assert_eq!(merged.len(), s.len().saturating_mul(2));
        let _ = (s.min(), s.max(), s.mean(), s.stdev());
        for q in [0.0, 0.5, 0.99, 1.0] {
            let _ = s.value_at_quantile(q);
        }
        let bytes = hist::encode_sparse(s).expect("a decoded histogram encodes");
        let back = hist::decode_sparse(&bytes).expect("an encoded histogram decodes");
        assert_eq!(&back, s, "sparse round trip");
    }
    if let Ok(d) = &dense {
        let wire = hist::encode_wire(d).expect("a decoded histogram encodes");
        assert_eq!(&hist::decode(&wire).expect("its wire form decodes"), d);
    }
    if let (Ok(s), Ok(d)) = (&sparse, &dense) {
        assert_eq!(
            &SparseHist::from_dense(d),
            s,
            "sparse and dense decoders disagree"
        );
    }
});
