//! A tower layer (feature `tower`): a permit of a [`Task`] per HTTP
//! request, for hyper, axum and any tower stack. The Rust counterpart of
//! the Python middleware (`flowctrl.asgi`, `flowctrl.wsgi`): the same
//! answers and headers, decided by the same task, host-wide.
//!
//! ```
//! use flowctrl::tower::{FlowctrlLayer, header};
//! # fn layer(api: flowctrl::Task) {
//! let limit = FlowctrlLayer::new(api).key(header(http::HeaderName::from_static("x-api-key")));
//! # }
//! ```
//!
//! What [`Flowctrl`], the service it makes, holds to:
//!
//! - **The inner service runs only with a permit.** Every request takes
//!   `cost` permits of the task (and of its key, where the layer's key
//!   function names one) before the inner service is called, without
//!   waiting. A refusal is answered at once and the inner service is not
//!   called: 429 with `Retry-After` the refusal's own wait (whole seconds,
//!   rounded up, at least 1) or, where the library knows none (a
//!   concurrency cap: a release decides), `unknown_retry_after` (default
//!   1; `None` leaves it out); for a keyed request the key's
//!   `RateLimit-Limit`, `RateLimit-Remaining` and `RateLimit-Reset`
//!   (draft-ietf-httpapi-ratelimit-headers-06) from [`Task::key_state`],
//!   unless the key's global rate refused it (those numbers are the key's
//!   rates on the host, which did not refuse). A blocked key gets 403,
//!   without `Retry-After`.
//! - **The permit is held to the end of the response body** and released
//!   once: `Success` when the body ends; `Dropped` when the inner service
//!   failed, answered 5xx, its body failed, or its future was dropped
//!   before it answered (a timeout above, a client gone before the
//!   headers); `Ignored` when the body was dropped before its end (the
//!   client went away mid-stream). The latency recorded is the whole
//!   exchange's, from admission to release.
//! - **Errors of the library become 503** (a table that cannot be read, a
//!   key function naming a key for a task without key limits), and a key
//!   longer than [`MAX_KEY_LEN`] 400: nothing a request carries makes the
//!   layer panic. The inner service's own errors pass through.
//! - `poll_ready` is the inner service's; a request refused after it keeps
//!   the readiness for the next one.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use http::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue, RETRY_AFTER};
use http::{Request, Response, StatusCode};
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use tower_layer::Layer;
use tower_service::Service;

use crate::{KeyRefused, MAX_KEY_LEN, Outcome, OwnedPermit, Task};

mod key;

pub use key::{ClientIp, Header, NoKey, RequestKey, header};

/// `RateLimit-Limit`: the key's tightest rate, its burst.
pub const RATELIMIT_LIMIT: HeaderName = HeaderName::from_static("ratelimit-limit");
/// `RateLimit-Remaining`: what that rate admits now.
pub const RATELIMIT_REMAINING: HeaderName = HeaderName::from_static("ratelimit-remaining");
/// `RateLimit-Reset`: seconds until that rate is whole again, rounded up.
pub const RATELIMIT_RESET: HeaderName = HeaderName::from_static("ratelimit-reset");

const TOO_MANY: &[u8] = b"Too Many Requests\n";
const FORBIDDEN: &[u8] = b"Forbidden\n";
const UNAVAILABLE: &[u8] = b"Service Unavailable\n";
const BAD_KEY: &[u8] = b"Bad Request: key too long\n";

/// What every service of a layer shares.
#[derive(Clone)]
struct Shared<K> {
    task: Task,
    key: K,
    cost: u32,
    unknown_retry_after: Option<u64>,
    rate_limit_headers: bool,
}

/// A layer taking a permit of a task per request (see the [module](self)).
/// Named apart from tower's own `RateLimitLayer` and
/// `ConcurrencyLimitLayer`, which a stack may hold beside it.
#[derive(Clone)]
pub struct FlowctrlLayer<K = NoKey> {
    shared: Shared<K>,
}

impl FlowctrlLayer {
    /// One permit of `task` per request, refused at once; the task's own
    /// limits only until [`key`](Self::key) names the caller.
    pub fn new(task: Task) -> Self {
        Self {
            shared: Shared {
                task,
                key: NoKey,
                cost: 1,
                unknown_retry_after: Some(1),
                rate_limit_headers: true,
            },
        }
    }
}

impl<K> FlowctrlLayer<K> {
    /// Names each request's caller: [`header`], [`ClientIp`] or a closure
    /// (see [`RequestKey`]). A key needs a task with key limits
    /// ([`Task::set_keys`]); without them a keyed request is answered 503.
    pub fn key<K2>(self, key: K2) -> FlowctrlLayer<K2> {
        let s = self.shared;
        FlowctrlLayer {
            shared: Shared {
                task: s.task,
                key,
                cost: s.cost,
                unknown_retry_after: s.unknown_retry_after,
                rate_limit_headers: s.rate_limit_headers,
            },
        }
    }

    /// Permits each request takes (default 1; 0 is taken as 1).
    pub fn cost(mut self, n: u32) -> Self {
        self.shared.cost = n.max(1);
        self
    }

    /// The `Retry-After` (seconds) of a refusal whose wait the library
    /// cannot know: a concurrency cap's. Default 1; `None` leaves it out.
    pub fn unknown_retry_after(mut self, seconds: Option<u64>) -> Self {
        self.shared.unknown_retry_after = seconds;
        self
    }

    /// Whether admitted keyed responses carry the key's `RateLimit-*`
    /// headers too (default true; refusals always do).
    pub fn rate_limit_headers(mut self, on: bool) -> Self {
        self.shared.rate_limit_headers = on;
        self
    }
}

impl<S, K: Clone> Layer<S> for FlowctrlLayer<K> {
    type Service = Flowctrl<S, K>;

    fn layer(&self, inner: S) -> Flowctrl<S, K> {
        Flowctrl {
            inner,
            shared: Arc::new(self.shared.clone()),
        }
    }
}

impl<K> std::fmt::Debug for FlowctrlLayer<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FlowctrlLayer")
            .field("task", &self.shared.task.name())
            .field("cost", &self.shared.cost)
            .finish_non_exhaustive()
    }
}

/// The service of [`FlowctrlLayer`]: `S` behind a permit per request.
pub struct Flowctrl<S, K = NoKey> {
    inner: S,
    shared: Arc<Shared<K>>,
}

impl<S: Clone, K> Clone for Flowctrl<S, K> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            shared: self.shared.clone(),
        }
    }
}

impl<S, K> std::fmt::Debug for Flowctrl<S, K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Flowctrl")
            .field("task", &self.shared.task.name())
            .finish_non_exhaustive()
    }
}

impl<S, K, ReqB, ResB> Service<Request<ReqB>> for Flowctrl<S, K>
where
    S: Service<Request<ReqB>, Response = Response<ResB>>,
    K: RequestKey<ReqB>,
    ResB: Body,
    ResB::Data: From<&'static [u8]>,
{
    type Response = Response<ResponseBody<ResB>>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqB>) -> Self::Future {
        let shared = &*self.shared;
        let key = shared.key.key(&request);
        let key = key.as_ref().map(AsRef::as_ref);
        let state = match admit(shared, key) {
            Ok(permit) => State::Called {
                future: self.inner.call(request),
                exchange: Some(Exchange {
                    permit,
                    answered: false,
                    server_error: false,
                }),
                key: key.filter(|_| shared.rate_limit_headers).map(Box::from),
            },
            Err(answer) => State::Answered {
                answer: Some(answer),
            },
        };
        ResponseFuture { state }
    }
}

/// A permit for the request, or the answer to give instead.
fn admit(shared: &Shared<impl Sized>, key: Option<&[u8]>) -> Result<OwnedPermit, Answer> {
    let (task, n) = (&shared.task, shared.cost);
    let Some(key) = key else {
        return match task.acquire_owned(n) {
            Ok(Ok(permit)) => Ok(permit),
            Ok(Err(why)) => Err(refusal(shared, None, task.retry_after(why, n))),
            Err(_) => Err(Answer::plain(StatusCode::SERVICE_UNAVAILABLE, UNAVAILABLE)),
        };
    };
    if key.len() > MAX_KEY_LEN {
        return Err(Answer::plain(StatusCode::BAD_REQUEST, BAD_KEY));
    }
    match task.acquire_key_owned(key, n) {
        Ok(Ok(permit)) => Ok(permit),
        Ok(Err(refused)) if refused.by == KeyRefused::Blocked => {
            Err(Answer::plain(StatusCode::FORBIDDEN, FORBIDDEN))
        }
        // A global refusal: the key's numbers on the host would say it
        // has room. Retry-After alone.
        Ok(Err(refused)) => {
            let key = (refused.by != KeyRefused::Global).then_some(key);
            Err(refusal(shared, key, refused.retry_after))
        }
        Err(_) => Err(Answer::plain(StatusCode::SERVICE_UNAVAILABLE, UNAVAILABLE)),
    }
}

/// The 429 of a refusal whose wait is `wait` (`None`: unknown).
fn refusal<K>(shared: &Shared<K>, key: Option<&[u8]>, wait: Option<Duration>) -> Answer {
    let mut answer = Answer::plain(StatusCode::TOO_MANY_REQUESTS, TOO_MANY);
    let retry_after = match wait {
        Some(wait) => Some(whole_seconds(wait).max(1)),
        None => shared.unknown_retry_after,
    };
    if let Some(seconds) = retry_after {
        answer.headers.insert(RETRY_AFTER, seconds.into());
    }
    if let Some(key) = key {
        rate_limit_headers(&shared.task, key, &mut answer.headers);
    }
    answer
}

/// Adds the key's `RateLimit-*` headers as they are now: none when the key
/// has no rate (only a cap, or unlimited) or its state cannot be read.
fn rate_limit_headers(task: &Task, key: &[u8], headers: &mut HeaderMap) {
    let Ok(state) = task.key_state(key) else {
        return;
    };
    if state.limit == 0 {
        return;
    }
    headers.insert(RATELIMIT_LIMIT, state.limit.into());
    headers.insert(RATELIMIT_REMAINING, state.remaining.into());
    headers.insert(RATELIMIT_RESET, whole_seconds(state.reset_after).into());
}

/// A duration in whole seconds, rounded up.
fn whole_seconds(d: Duration) -> u64 {
    d.as_secs().saturating_add(u64::from(d.subsec_nanos() > 0))
}

/// An answer the layer gives itself: status, headers and a short text.
struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    text: &'static [u8],
}

impl Answer {
    fn plain(status: StatusCode, text: &'static [u8]) -> Self {
        let mut headers = HeaderMap::new();
        headers.insert(
            CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        Self {
            status,
            headers,
            text,
        }
    }

    fn into_response<B: Body>(self) -> Response<ResponseBody<B>> {
        let mut response = Response::new(ResponseBody {
            inner: None,
            text: Some(self.text),
            exchange: None,
        });
        *response.status_mut() = self.status;
        *response.headers_mut() = self.headers;
        response
    }
}

/// An admitted request's permit; released once, by [`Exchange::end`] or,
/// dropped before, as the facts say.
struct Exchange {
    permit: OwnedPermit,
    /// The inner service answered (headers).
    answered: bool,
    /// It answered 5xx.
    server_error: bool,
}

impl Exchange {
    /// Released: the response is whole (or failed).
    fn end(mut self, outcome: Outcome) {
        // A release the library refuses cannot be reported from here;
        // the permit's guard tries again, as ignored, when dropped.
        let _ = self.permit.finish_once(outcome.into());
    }

    /// The body ended: the whole response was sent.
    fn complete(self) {
        let outcome = if self.server_error {
            Outcome::Dropped
        } else {
            Outcome::Success
        };
        self.end(outcome);
    }
}

impl Drop for Exchange {
    fn drop(&mut self) {
        let outcome = if !self.answered || self.server_error {
            Outcome::Dropped
        } else {
            Outcome::Ignored
        };
        let _ = self.permit.finish_once(outcome.into());
    }
}

pin_project! {
    /// The future of [`Flowctrl`]: the inner service's, holding the permit,
    /// or the layer's own answer.
    pub struct ResponseFuture<F> {
        #[pin]
        state: State<F>,
    }
}

pin_project! {
    #[project = FutureProj]
    enum State<F> {
        Called {
            #[pin]
            future: F,
            exchange: Option<Exchange>,
            // The key, when admitted responses carry its headers.
            key: Option<Box<[u8]>>,
        },
        Answered {
            answer: Option<Answer>,
        },
    }
}

impl<F, B, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<Response<B>, E>>,
    B: Body,
{
    type Output = Result<Response<ResponseBody<B>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().state.project() {
            FutureProj::Answered { answer } => {
                // Polled again after it completed: a 503 rather than a panic.
                let answer = answer
                    .take()
                    .unwrap_or_else(|| Answer::plain(StatusCode::SERVICE_UNAVAILABLE, UNAVAILABLE));
                Poll::Ready(Ok(answer.into_response()))
            }
            FutureProj::Called {
                future,
                exchange,
                key,
            } => {
                let result = ready!(future.poll(cx));
                let mut exchange = exchange.take();
                let response = match result {
                    Ok(response) => response,
                    Err(error) => {
                        if let Some(exchange) = exchange {
                            exchange.end(Outcome::Dropped);
                        }
                        return Poll::Ready(Err(error));
                    }
                };
                let (mut parts, body) = response.into_parts();
                if let Some(exchange) = &mut exchange {
                    exchange.answered = true;
                    exchange.server_error = parts.status.is_server_error();
                    if let Some(key) = key.take() {
                        rate_limit_headers(exchange.permit.task(), &key, &mut parts.headers);
                    }
                }
                if body.is_end_stream() {
                    // Nothing more to send (a 204, an empty body): hyper
                    // may never poll it.
                    if let Some(exchange) = exchange.take() {
                        exchange.complete();
                    }
                }
                let body = ResponseBody {
                    inner: Some(body),
                    text: None,
                    exchange,
                };
                Poll::Ready(Ok(Response::from_parts(parts, body)))
            }
        }
    }
}

pin_project! {
    /// The response body: the inner service's, holding the request's permit
    /// until it ends, fails or is dropped; or the text of the layer's own
    /// answer.
    pub struct ResponseBody<B> {
        #[pin]
        inner: Option<B>,
        text: Option<&'static [u8]>,
        exchange: Option<Exchange>,
    }
}

impl<B> Body for ResponseBody<B>
where
    B: Body,
    B::Data: From<&'static [u8]>,
{
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        let this = self.project();
        let Some(mut inner) = this.inner.as_pin_mut() else {
            return Poll::Ready(this.text.take().map(|t| Ok(Frame::data(t.into()))));
        };
        let frame = ready!(inner.as_mut().poll_frame(cx));
        match &frame {
            Some(Err(_)) => {
                if let Some(exchange) = this.exchange.take() {
                    exchange.end(Outcome::Dropped);
                }
            }
            Some(Ok(_)) if !inner.is_end_stream() => {}
            _ => {
                if let Some(exchange) = this.exchange.take() {
                    exchange.complete();
                }
            }
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        match &self.inner {
            Some(inner) => inner.is_end_stream(),
            None => self.text.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.inner {
            Some(inner) => inner.size_hint(),
            None => SizeHint::with_exact(self.text.map_or(0, |t| t.len() as u64)),
        }
    }
}

impl<F> std::fmt::Debug for ResponseFuture<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}

impl<B> std::fmt::Debug for ResponseBody<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseBody")
            .field("holds_permit", &self.exchange.is_some())
            .finish_non_exhaustive()
    }
}
