//! What a manager did and saw: read by its metrics endpoint, its tests and
//! `flowctrl fleet` (through the store's decision keys).

use std::collections::BTreeMap;

/// A manager instance's counters and the fleet as it last judged it.
#[derive(Clone, Debug, Default)]
pub struct ManagerReport {
    pub id: String,
    /// Whether this instance holds the lease, and by which token.
    pub active: bool,
    pub token: u64,
    /// Who holds the lease, as last read ("<id> <token>").
    pub holder: String,
    pub acquisitions: u64,
    pub step_downs: u64,
    pub ticks: u64,
    pub tick_seconds_last: f64,
    pub tick_seconds_max: f64,
    /// Script calls that wrote a task, and those refused for an older token.
    pub writes: u64,
    pub writes_fenced: u64,
    /// Keyed tasks' records of their keys' global rates written (changed).
    pub key_records_written: u64,
    /// Slice keys written ahead, and slices found begun before their write.
    pub keys_written: u64,
    pub slices_late: u64,
    /// Pipelines that failed (the store did not answer).
    pub store_errors: u64,
    /// Alarms raised, by kind.
    pub alarms: BTreeMap<&'static str, u64>,
    pub tasks: BTreeMap<String, TaskReport>,
    /// The keyed tasks' hot keys: the keys the store gave most of in each
    /// one's last slice (at most `HOT_KEYS` a task).
    pub hot_keys: BTreeMap<String, crate::quota::HotKeys>,
}

/// One managed task.
#[derive(Clone, Debug, Default)]
pub struct TaskReport {
    /// The threshold in force (requests/s) and its last change.
    pub threshold: f64,
    pub last_change: Option<Decision>,
    /// Threshold changes, by reason word.
    pub changes: BTreeMap<String, u64>,
    /// The last judged slice: its number, live hosts, requests/s admitted,
    /// releases, highest p99 and each host's clock offset.
    pub slice: u64,
    pub hosts: u64,
    pub admitted: f64,
    pub success: u64,
    pub dropped: u64,
    pub p99_us: u64,
    pub offsets_us: BTreeMap<String, i64>,
}

/// A threshold change, as the store's change log keeps it.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    pub threshold: f64,
    pub reason: String,
    /// The store's clock, ms since the Unix epoch.
    pub at_ms: i64,
    pub manager: String,
}

impl Decision {
    /// "threshold reason at_ms manager": one word each.
    pub(crate) fn encode(&self) -> String {
        format!(
            "{} {} {} {}",
            self.threshold, self.reason, self.at_ms, self.manager
        )
    }

    pub(crate) fn decode(text: &str) -> Option<Self> {
        let mut words = text.split(' ');
        let decision = Self {
            threshold: words.next()?.parse().ok()?,
            reason: words.next()?.to_string(),
            at_ms: words.next()?.parse().ok()?,
            manager: words.next()?.to_string(),
        };
        // A hand-written or corrupted entry is no decision: a threshold no
        // policy sets, or words that are no manager's.
        let plausible = decision.threshold.is_finite()
            && decision.threshold > 0.0
            && crate::words::validate_name(&decision.manager, "manager id").is_ok()
            && !decision.reason.is_empty()
            && decision.reason.chars().all(|c| c.is_ascii_graphic());
        (words.next().is_none() && plausible).then_some(decision)
    }
}

impl crate::quota::Store {
    /// The manager's threshold changes of `task`, newest first (up to 50;
    /// empty when no manager moved it). One round trip.
    pub fn decisions(&self, task: &str) -> crate::Result<Vec<Decision>> {
        crate::words::validate_name(task, "task name")?;
        let key = super::write::changes_key(self.redis().prefix(), task);
        let list: Vec<String> = self
            .redis()
            .round_trip("read the threshold changes", |conn| {
                redis::cmd("LRANGE").arg(&key).arg(0).arg(49).query(conn)
            })?;
        Ok(list.iter().filter_map(|d| Decision::decode(d)).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decisions_round_trip_and_garbage_does_not() {
        let d = Decision {
            threshold: 412.5,
            reason: "dropped_ratio=0.310".into(),
            at_ms: 1_700_000_000_123,
            manager: "m-1".into(),
        };
        assert_eq!(Decision::decode(&d.encode()), Some(d));
        for bad in [
            "",
            "1 r",
            "x r 1 m",
            "1 r 1 m extra",
            "NaN r 1 m",
            "inf r 1 m",
            "-5 r 1 m",
            "1 r 1 m\u{1b}[2J",
            "1 r\u{7} 1 m",
        ] {
            assert_eq!(Decision::decode(bad), None, "{bad}");
        }
    }
}
