//! The layer's key functions: which caller a request is.

use std::net::{IpAddr, SocketAddr};

use http::Request;
use http::header::{HeaderName, HeaderValue};

/// Names a request's caller: `Some(key)` applies that key's limits and the
/// task's own, `None` the task's own only. Any
/// `Fn(&Request<B>) -> Option<K>` with `K: AsRef<[u8]>` is one.
pub trait RequestKey<B> {
    type Key: AsRef<[u8]>;
    fn key(&self, request: &Request<B>) -> Option<Self::Key>;
}

impl<B, F, K> RequestKey<B> for F
where
    F: Fn(&Request<B>) -> Option<K>,
    K: AsRef<[u8]>,
{
    type Key = K;

    fn key(&self, request: &Request<B>) -> Option<K> {
        self(request)
    }
}

/// No key: every request takes the task's own limits only.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoKey;

impl<B> RequestKey<B> for NoKey {
    type Key = [u8; 0];

    fn key(&self, _: &Request<B>) -> Option<[u8; 0]> {
        None
    }
}

/// The key of [`header`]: the header's first value, as bytes.
#[derive(Clone, Debug)]
pub struct Header(HeaderName);

/// A key function: the request header `name` (its first value), or `None`
/// when the request has none (the task's own limits then apply).
pub fn header(name: HeaderName) -> Header {
    Header(name)
}

impl<B> RequestKey<B> for Header {
    type Key = HeaderValue;

    fn key(&self, request: &Request<B>) -> Option<HeaderValue> {
        request.headers().get(&self.0).cloned()
    }
}

/// A key function: the client's IP address as text (`203.0.113.7`,
/// IPv4-mapped IPv6 addresses as IPv4), from a [`SocketAddr`] or an
/// [`IpAddr`] in the request's extensions; `None` without one. hyper does
/// not put the peer there: insert it per connection (see the guide). For
/// axum's `ConnectInfo<SocketAddr>`, a closure:
/// `|r: &Request<_>| r.extensions().get::<ConnectInfo<SocketAddr>>().map(|c| c.0.ip().to_string())`.
#[derive(Clone, Copy, Debug, Default)]
pub struct ClientIp;

impl<B> RequestKey<B> for ClientIp {
    type Key = String;

    fn key(&self, request: &Request<B>) -> Option<String> {
        let extensions = request.extensions();
        let ip = match extensions.get::<SocketAddr>() {
            Some(addr) => addr.ip(),
            None => *extensions.get::<IpAddr>()?,
        };
        Some(ip.to_canonical().to_string())
    }
}
