//! What an operator should hear about a fleet, judged from its census:
//! a host whose clock is off the store's, hosts of one task spending by
//! different numbers, a host gone silent. `flowctrl fleet` and the manager
//! judge alike.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use crate::quota::Fleet;

/// One alarm about a task's hosts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Alarm {
    /// The host's clock is `offset_us` off the store's (it still spends by
    /// the store's slices, but its local decisions drift).
    Skew { host: String, offset_us: i64 },
    /// Hosts create keys with different thresholds per slice (0: spends by
    /// the store record): they disagree on the task's global numbers.
    Configs {
        by_quota: BTreeMap<u64, Vec<String>>,
    },
    /// A host that pulled has not for this long: its store fails (it is in
    /// fallback), or it is gone.
    Silent { host: String, silent_ms: u64 },
}

impl Alarm {
    /// Every kind there is (`flowctrl_manager_alarms_total{kind}` counts
    /// each from 0).
    pub const KINDS: [&'static str; 3] = ["skew", "configs", "silent"];

    /// The alarm's kind, for metrics labels and log filters.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Skew { .. } => "skew",
            Self::Configs { .. } => "configs",
            Self::Silent { .. } => "silent",
        }
    }
}

impl fmt::Display for Alarm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Skew { host, offset_us } => write!(
                f,
                "host {host:?}'s clock is {:.1} ms off the store's",
                *offset_us as f64 / 1000.0
            ),
            Self::Configs { by_quota } => {
                f.write_str("hosts run different configurations:")?;
                for (quota, hosts) in by_quota {
                    match quota {
                        0 => write!(f, " by the store record: {}", hosts.join(", "))?,
                        q => write!(f, " own threshold {q}/slice: {}", hosts.join(", "))?,
                    }
                    f.write_str(";")?;
                }
                Ok(())
            }
            Self::Silent { host, silent_ms } => write!(
                f,
                "host {host:?} has not pulled for {:.1} s (its store fails, or it is gone)",
                *silent_ms as f64 / 1000.0
            ),
        }
    }
}

/// The alarms a census shows: clocks off by more than `skew`, and
/// disagreeing configurations (hosts that do not report theirs are left
/// out). The newest record of each host counts.
pub fn fleet_alarms(fleet: &Fleet, skew: Duration) -> Vec<Alarm> {
    let mut alarms = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    let mut by_quota: BTreeMap<u64, Vec<String>> = BTreeMap::new();
    for h in &fleet.hosts {
        if !seen.insert(h.host.as_str()) {
            continue;
        }
        if h.offset_us.unsigned_abs() > skew.as_micros() as u64 {
            alarms.push(Alarm::Skew {
                host: h.host.clone(),
                offset_us: h.offset_us,
            });
        }
        if let Some(q) = h.own_quota {
            by_quota.entry(q).or_default().push(h.host.clone());
        }
    }
    if by_quota.len() > 1 {
        alarms.push(Alarm::Configs { by_quota });
    }
    alarms
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quota::{HostHealth, HostRecord};

    fn host(name: &str, offset_us: i64, own: Option<u64>) -> HostRecord {
        HostRecord {
            host: name.into(),
            slice: 9,
            asked: 1,
            granted: 1,
            claimed: 1,
            offset_us,
            demand: 1,
            health: HostHealth::default(),
            own_quota: own,
        }
    }

    #[test]
    fn skewed_clocks_and_split_configurations_are_named() {
        let fleet = Fleet {
            task: "t".into(),
            slice_ms: 1000,
            slice: 10,
            quota: Some(100),
            hosts: vec![
                host("a", 80_000, Some(0)),
                host("b", -10_000, Some(0)),
                host("c", 0, Some(500)),
                host("d", -51_000, None),
            ],
        };
        let alarms = fleet_alarms(&fleet, Duration::from_millis(50));
        assert_eq!(alarms.len(), 3, "{alarms:?}");
        assert_eq!(alarms[0].kind(), "skew");
        assert!(alarms.iter().all(|a| Alarm::KINDS.contains(&a.kind())));
        assert!(alarms[0].to_string().contains("80.0 ms"));
        assert!(alarms[1].to_string().contains("\"d\""));
        let configs = alarms[2].to_string();
        assert!(configs.contains("by the store record: a, b"), "{configs}");
        assert!(configs.contains("own threshold 500/slice: c"), "{configs}");
        let calm = Fleet {
            hosts: vec![host("a", 1000, Some(0)), host("b", 0, Some(0))],
            ..fleet
        };
        assert!(fleet_alarms(&calm, Duration::from_millis(50)).is_empty());
    }
}
