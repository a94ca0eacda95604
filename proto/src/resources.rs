//! An agent's own figures on the wire (`AgentResources`): CPU, memory, open files and its
//! ports toward each destination, bounded and validated, the error naming the field.

use stampede_core::report::{DestinationSample, ResourceSample, MAX_DESTINATIONS};

use crate::convert::ConvertError;
use crate::v1;

/// Longest destination accepted: `[` an IPv6 address with a zone `]:65535`.
const MAX_ADDRESS_LEN: usize = 64;

/// An agent's figures for one interval, checked: the CPU share and cores finite and not
/// negative, at most [`MAX_DESTINATIONS`] destinations, each an `ip:port`.
pub fn resources_from_wire(r: &v1::AgentResources) -> Result<ResourceSample, ConvertError> {
    let finite = |field: &str, v: f64| {
        if v.is_finite() && v >= 0.0 {
            Ok(v)
        } else {
            Err(ConvertError::invalid(
                format!("resources.{field}"),
                format!("{v} is not a finite number >= 0"),
            ))
        }
    };
    if r.destinations.len() > MAX_DESTINATIONS {
        return Err(ConvertError::invalid(
            "resources.destinations",
            format!(
                "{} destinations; at most {MAX_DESTINATIONS}",
                r.destinations.len()
            ),
        ));
    }
    let destinations = r
        .destinations
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let field = || format!("resources.destinations[{i}].address");
            if d.address.len() > MAX_ADDRESS_LEN {
                return Err(ConvertError::invalid(
                    field(),
                    format!("{} bytes; at most {MAX_ADDRESS_LEN}", d.address.len()),
                ));
            }
            let address = d.address.parse().map_err(|_| {
                ConvertError::invalid(field(), format!("`{}` is not an ip:port", d.address))
            })?;
            Ok(DestinationSample {
                address,
                in_use: d.in_use,
                time_wait: d.time_wait,
                addr_not_available: d.addr_not_available,
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(ResourceSample {
        cpu_share: finite("cpu_share", r.cpu_share)?,
        rss_bytes: r.rss_bytes,
        open_files: r.open_files,
        cores: finite("cores", r.cores)?,
        usable_ports: r.usable_ports,
        destinations,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dest(address: &str) -> v1::DestinationPorts {
        v1::DestinationPorts {
            address: address.to_string(),
            in_use: 10,
            time_wait: 4,
            addr_not_available: 1,
        }
    }

    #[test]
    fn resources_are_read_and_bad_ones_refused_naming_the_field() {
        let good = v1::AgentResources {
            cpu_share: 0.5,
            rss_bytes: 1 << 20,
            open_files: 30,
            cores: 2.0,
            usable_ports: 28_232,
            destinations: vec![dest("127.0.0.1:8080"), dest("[::1]:443")],
        };
        let s = resources_from_wire(&good).unwrap();
        assert_eq!(s.usable_ports, 28_232);
        assert_eq!(s.destinations.len(), 2);
        assert_eq!(s.destinations[1].address, "[::1]:443".parse().unwrap());
        assert_eq!(
            (s.destinations[0].in_use, s.destinations[0].time_wait),
            (10, 4)
        );
        let cases: Vec<(v1::AgentResources, &str)> = vec![
            (
                v1::AgentResources {
                    cpu_share: f64::NAN,
                    ..good.clone()
                },
                "resources.cpu_share: NaN is not a finite number >= 0",
            ),
            (
                v1::AgentResources {
                    cores: -1.0,
                    ..good.clone()
                },
                "resources.cores: -1 is not a finite number >= 0",
            ),
            (
                v1::AgentResources {
                    destinations: vec![dest("127.0.0.1:8080"), dest("h:80")],
                    ..good.clone()
                },
                "resources.destinations[1].address: `h:80` is not an ip:port",
            ),
            (
                v1::AgentResources {
                    destinations: vec![dest(&"1".repeat(65))],
                    ..good.clone()
                },
                "resources.destinations[0].address: 65 bytes; at most 64",
            ),
            (
                v1::AgentResources {
                    destinations: vec![dest("127.0.0.1:1"); MAX_DESTINATIONS + 1],
                    ..good.clone()
                },
                "resources.destinations: 65 destinations; at most 64",
            ),
        ];
        for (wire, why) in cases {
            assert_eq!(resources_from_wire(&wire).unwrap_err().to_string(), why);
        }
    }
}
