//! Store URLs as messages, logs and views show them: never a password.

/// Query parameters that carry a password (`unix:///path?pass=...`, as the
/// `redis` crate reads them).
const SECRET_PARAMS: [&str; 3] = ["pass", "password", "auth"];

/// A store URL as every message, log line and view shows it: the one
/// redaction, for every form the store accepts. The userinfo's password
/// (everything from the first `:` after the scheme to the last `@`, so a
/// password holding `/`, `@` or `:` is masked whole, in a single server's
/// URL and in a Sentinel or Cluster list alike; without a `:` the whole
/// userinfo) and the value of a `pass`/`password`/`auth` query parameter
/// (up to the next parameter that has a `=`) become `***`. Cut at 200
/// characters, like every echo.
pub(crate) fn redact(url: &str) -> String {
    let (head, rest) = match url.find("://") {
        Some(i) => url.split_at(i + 3),
        None => ("", url),
    };
    let mut out = String::from(head);
    let rest = match rest.rfind('@') {
        Some(at) => {
            match rest[..at].split_once(':') {
                Some((user, _)) => {
                    out.push_str(user);
                    out.push_str(":***@");
                }
                None => out.push_str("***@"),
            }
            &rest[at + 1..]
        }
        None => rest,
    };
    let Some((path, query)) = rest.split_once('?') else {
        out.push_str(rest);
        return crate::words::cut(&out, 200);
    };
    out.push_str(path);
    out.push('?');
    let mut masking = false;
    let pairs: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((name, _)) if SECRET_PARAMS.contains(&name.to_ascii_lowercase().as_str()) => {
                masking = true;
                format!("{name}=***")
            }
            Some(_) => {
                masking = false;
                pair.to_string()
            }
            // A bare word after a password: the rest of a password that
            // held `&`.
            None if masking => "***".to_string(),
            None => pair.to_string(),
        })
        .collect();
    out.push_str(&pairs.join("&"));
    crate::words::cut(&out, 200)
}
