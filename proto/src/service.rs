//! A Service's ready endpoints on the wire (`Assign.service_endpoints`, `ServiceEndpoints`),
//! to and from core's [`ServiceEndpoint`], bounded and validated.

use std::net::SocketAddr;

use stampede_core::endpoints::MAX_ENDPOINTS;
use stampede_core::service::ServiceEndpoint;

use crate::v1;
use crate::ConvertError;

/// Longest pod name kept (Kubernetes names are at most 253 bytes).
const MAX_POD_NAME: usize = 253;

/// The wire form of a ready set.
pub fn to_wire(set: &[ServiceEndpoint]) -> Vec<v1::ServiceEndpoint> {
    set.iter()
        .map(|e| v1::ServiceEndpoint {
            address: e.address.to_string(),
            pod: e.pod.clone().unwrap_or_default(),
        })
        .collect()
}

/// A ready set from the wire: at most [`MAX_ENDPOINTS`], each an `ip:port` with a port, none
/// twice, pod names bounded. `field` names the list in errors.
pub fn from_wire(
    field: &str,
    wire: &[v1::ServiceEndpoint],
) -> Result<Vec<ServiceEndpoint>, ConvertError> {
    if wire.len() > MAX_ENDPOINTS {
        return Err(ConvertError::invalid(
            field,
            format!("{} endpoints; at most {MAX_ENDPOINTS}", wire.len()),
        ));
    }
    let mut out: Vec<ServiceEndpoint> = Vec::with_capacity(wire.len());
    for (i, e) in wire.iter().enumerate() {
        let at = format!("{field}[{i}]");
        let address: SocketAddr = e.address.parse().map_err(|_| {
            ConvertError::invalid(
                format!("{at}.address"),
                "not an ip:port address".to_string(),
            )
        })?;
        if address.port() == 0 {
            return Err(ConvertError::invalid(format!("{at}.address"), "port 0"));
        }
        if out.iter().any(|o| o.address == address) {
            return Err(ConvertError::invalid(
                format!("{at}.address"),
                format!("{address} is listed twice"),
            ));
        }
        if e.pod.len() > MAX_POD_NAME {
            return Err(ConvertError::invalid(
                format!("{at}.pod"),
                format!("{} bytes; at most {MAX_POD_NAME}", e.pod.len()),
            ));
        }
        out.push(ServiceEndpoint {
            address,
            pod: (!e.pod.is_empty()).then(|| e.pod.clone()),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sets_round_trip_and_bad_ones_name_the_field() {
        let set = vec![
            ServiceEndpoint {
                address: "10.0.0.1:80".parse().unwrap(),
                pod: Some("web-1".into()),
            },
            ServiceEndpoint {
                address: "[fd00::2]:80".parse().unwrap(),
                pod: None,
            },
        ];
        let wire = to_wire(&set);
        assert_eq!(from_wire("x", &wire).unwrap(), set);
        let mut bad = wire.clone();
        bad[1].address = "web:80".into();
        let e = from_wire("assign.service_endpoints", &bad).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("assign.service_endpoints[1].address: not an ip:port"),
            "{e}"
        );
        let mut twice = wire.clone();
        twice[1].address = twice[0].address.clone();
        assert!(from_wire("x", &twice)
            .unwrap_err()
            .to_string()
            .contains("twice"));
        let mut long = wire;
        long[0].pod = "p".repeat(MAX_POD_NAME + 1);
        assert!(from_wire("x", &long)
            .unwrap_err()
            .to_string()
            .starts_with("x[0].pod"));
        let many = vec![
            v1::ServiceEndpoint {
                address: "10.0.0.1:1".into(),
                pod: String::new(),
            };
            MAX_ENDPOINTS + 1
        ];
        assert!(from_wire("x", &many)
            .unwrap_err()
            .to_string()
            .contains("at most"));
    }
}
