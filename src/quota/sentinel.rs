//! Finding the master through Sentinel, within the request's budget: the
//! `redis` crate's sentinel client connects to the sentinels without
//! timeouts, so a sentinel that hangs would hang the pull past the store
//! timeout.

use std::time::Duration;

use redis::{ConnectionInfo, IntoConnectionInfo};

use super::deadline::{Budget, within};
use super::link::Link;

/// A connection to the master the first sentinel that knows `name` names,
/// checked to be a master (a sentinel may still name a demoted or dead one
/// for a moment: then the next sentinel is asked). Asking each sentinel is
/// given `connect` of its own (and adds it to the budget); connecting to
/// the master and asking its role, `connect` within the budget.
pub(super) fn find_master(
    sentinels: &[(ConnectionInfo, ConnectionInfo)],
    (name, scheme, auth, db): (&str, &str, &str, i64),
    connect: Duration,
    budget: &mut Budget,
) -> redis::RedisResult<Link> {
    let mut last = None;
    for (with_auth, without) in sentinels {
        budget.bound += connect;
        let found = within(budget.step(connect), || {
            let mut conn = match Link::connect(with_auth, None) {
                Err(e) if e.to_string().contains("without any password configured") => {
                    Link::connect(without, None)
                }
                conn => conn,
            }?;
            let addr: Option<(String, u16)> = redis::cmd("SENTINEL")
                .arg("get-master-addr-by-name")
                .arg(name)
                .query(&mut conn)?;
            addr.ok_or_else(|| {
                redis::RedisError::from((
                    redis::ErrorKind::Client,
                    "the sentinel knows no master of this name",
                    name.to_string(),
                ))
            })
        });
        let (host, port) = match found {
            Ok(addr) => addr,
            Err(e) => {
                last = Some(e);
                continue;
            }
        };
        let info = format!("{scheme}://{auth}{host}:{port}/{db}").into_connection_info()?;
        // A sentinel that has not heard of a failover yet names the dead
        // master: the next sentinel may name the promoted one.
        let role = within(budget.step(connect), || {
            let mut conn = Link::connect(&info, None)?;
            let role: Vec<redis::Value> = redis::cmd("ROLE").query(&mut conn)?;
            let is_master =
                matches!(role.first(), Some(redis::Value::BulkString(b)) if b == b"master");
            redis::RedisResult::Ok((conn, is_master))
        });
        match role {
            Ok((conn, true)) => return Ok(conn),
            Ok((_, false)) => {
                last = Some(redis::RedisError::from((
                    redis::ErrorKind::Client,
                    "the master the sentinels name is not a master (a failover is under way)",
                    format!("{host}:{port}"),
                )))
            }
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| {
        redis::RedisError::from((redis::ErrorKind::Client, "no sentinel in the URL"))
    }))
}
