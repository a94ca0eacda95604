//! Connect times per stage of a connection ramp on the wire (a Progress's `stage_connects`):
//! at most one histogram per stage of the load, each in the one histogram spec.

use stampede_core::hist::{self, SparseHist};

use crate::convert::ConvertError;
use crate::v1;

/// The stages' connect times of one Progress, checked: a stage the load has (`stages` of
/// them), once each, and a histogram that decodes in the one spec.
pub fn stage_connects_from_wire(
    p: &v1::Progress,
    stages: usize,
) -> Result<Vec<(u32, SparseHist)>, ConvertError> {
    if p.stage_connects.len() > stages {
        return Err(ConvertError::invalid(
            "progress.stage_connects",
            format!(
                "{} entries, but the load has {stages} stages",
                p.stage_connects.len()
            ),
        ));
    }
    let mut seen = vec![false; stages];
    p.stage_connects
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let field = |f: &str| format!("progress.stage_connects[{i}].{f}");
            match seen.get_mut(s.stage as usize) {
                Some(false) => {}
                Some(true) => {
                    return Err(ConvertError::invalid(
                        field("stage"),
                        format!("stage {} twice", s.stage),
                    ))
                }
                None => {
                    return Err(ConvertError::invalid(
                        field("stage"),
                        format!("stage {}, but the load has {stages} stages", s.stage),
                    ))
                }
            }
            seen[s.stage as usize] = true;
            let h = hist::decode_sparse(&s.hist).map_err(|error| ConvertError::Hist {
                field: field("hist"),
                error,
            })?;
            Ok((s.stage, h))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(stage: u32, us: u64) -> v1::StageConnects {
        let mut h = SparseHist::default();
        h.record_n(us, 3);
        v1::StageConnects {
            stage,
            hist: hist::encode_wire_sparse(&h).unwrap(),
        }
    }

    #[test]
    fn stage_connects_are_read_and_bad_ones_refused_naming_the_field() {
        let p = |stage_connects| v1::Progress {
            stage_connects,
            ..Default::default()
        };
        let got = stage_connects_from_wire(&p(vec![entry(0, 150), entry(2, 9_000)]), 3).unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!((got[1].0, got[1].1.len()), (2, 3));
        for (wire, stages, why) in [
            (
                vec![entry(0, 1), entry(1, 1)],
                1,
                "progress.stage_connects: 2 entries, but the load has 1 stages",
            ),
            (
                vec![entry(3, 1)],
                3,
                "progress.stage_connects[0].stage: stage 3, but the load has 3 stages",
            ),
            (
                vec![entry(1, 1), entry(1, 1)],
                3,
                "progress.stage_connects[1].stage: stage 1 twice",
            ),
        ] {
            let e = stage_connects_from_wire(&p(wire), stages)
                .unwrap_err()
                .to_string();
            assert_eq!(e, why);
        }
        let garbage = v1::StageConnects {
            stage: 0,
            hist: vec![0xff; 40],
        };
        let e = stage_connects_from_wire(&p(vec![garbage]), 1)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("progress.stage_connects[0].hist: "), "{e}");
    }
}
