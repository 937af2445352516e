//! The tower layer in a real hyper server on 127.0.0.1, driven by real
//! hyper clients over TCP: a concurrency cap held to the end of streamed
//! bodies, a client gone mid-stream, a rate's `Retry-After` and
//! `RateLimit-*` numbers, a 5xx and an inner error released as dropped,
//! and keys limited apart.

#![cfg(feature = "tower")]

mod common;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};

use common::Scratch;
use flowctrl::tower::{FlowctrlLayer, RequestKey, header};
use flowctrl::{
    KeyConfig, KeyLimits, KeyRate, Limited, Table, TableOptions, Task, TaskConfig, TaskStats,
};
use http::{HeaderName, Request, Response, StatusCode};
use http_body::{Body, Frame};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::{Bytes, Incoming};
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tower::{ServiceBuilder, service_fn};

const API_KEY: HeaderName = HeaderName::from_static("x-api-key");

/// A streamed body: a chunk every 10 ms until its gate opens, then its end.
struct Gated {
    open: Arc<AtomicBool>,
    tick: Pin<Box<tokio::time::Sleep>>,
}

impl Body for Gated {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        ready!(self.tick.as_mut().poll(cx));
        if self.open.load(Ordering::SeqCst) {
            return Poll::Ready(None);
        }
        let next = tokio::time::Instant::now() + Duration::from_millis(10);
        self.tick.as_mut().reset(next);
        Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(b"chunk\n")))))
    }
}

/// The inner service's state: the gate of its streamed bodies and the
/// requests it was called with.
#[derive(Default)]
struct App {
    open: Arc<AtomicBool>,
    calls: AtomicU32,
}

type AppBody = BoxBody<Bytes, Infallible>;

impl App {
    /// `/slow`: a gated stream; `/fail`: 500; `/error`: the service fails;
    /// anything else: 200.
    async fn handle(&self, request: Request<Incoming>) -> std::io::Result<Response<AppBody>> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let text = |status: StatusCode| {
            let mut r = Response::new(Full::new(Bytes::from_static(b"text\n")).boxed());
            *r.status_mut() = status;
            r
        };
        Ok(match request.uri().path() {
            "/slow" => Response::new(
                Gated {
                    open: self.open.clone(),
                    tick: Box::pin(tokio::time::sleep(Duration::ZERO)),
                }
                .boxed(),
            ),
            "/fail" => text(StatusCode::INTERNAL_SERVER_ERROR),
            "/error" => return Err(std::io::Error::other("the inner service failed")),
            _ => text(StatusCode::OK),
        })
    }
}

/// Serves `app` behind `layer` on a free port of 127.0.0.1.
async fn serve<K>(layer: FlowctrlLayer<K>, app: Arc<App>) -> SocketAddr
where
    K: RequestKey<Incoming> + Clone + Send + Sync + 'static,
{
    let service = ServiceBuilder::new().layer(layer).service(service_fn(
        move |request: Request<Incoming>| {
            let app = app.clone();
            async move { app.handle(request).await }
        },
    ));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let service = TowerToHyperService::new(service.clone());
            tokio::spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}

/// A request on a connection of its own; the connection's task too, to
/// abort (the client going away).
async fn get(
    addr: SocketAddr,
    path: &str,
    key: Option<&str>,
) -> (hyper::Result<Response<Incoming>>, JoinHandle<()>) {
    let stream = TcpStream::connect(addr).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    let connection = tokio::spawn(async move {
        let _ = connection.await;
    });
    let mut request = Request::get(path).header(http::header::HOST, "127.0.0.1");
    if let Some(key) = key {
        request = request.header(API_KEY, key);
    }
    let response = sender
        .send_request(request.body(Empty::<Bytes>::new()).unwrap())
        .await;
    (response, connection)
}

/// A request whose answer is read whole: status, headers and body.
async fn fetch(addr: SocketAddr, path: &str, key: Option<&str>) -> (StatusCode, http::HeaderMap) {
    let (response, _connection) = get(addr, path, key).await;
    let (parts, body) = response.unwrap().into_parts();
    body.collect().await.unwrap();
    (parts.status, parts.headers)
}

fn number(headers: &http::HeaderMap, name: &str) -> Option<u64> {
    headers.get(name)?.to_str().ok()?.parse().ok()
}

/// The task's counters once `done` holds of them, within 5 s.
async fn stats_once(task: &Task, done: impl Fn(&TaskStats) -> bool) -> TaskStats {
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        let stats = task.stats();
        if done(&stats) || Instant::now() >= until {
            return stats;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn keyed_task(table: &Table, limits: KeyLimits) -> Task {
    let task = table.task("api", &TaskConfig::new()).unwrap();
    task.set_keys(&KeyConfig::new(limits)).unwrap();
    task
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cap_of_n_holds_until_the_streamed_bodies_end() {
    const N: usize = 3;
    let scratch = Scratch::new("tower-cap");
    let table = Table::open(scratch.path("t"), &TableOptions::default()).unwrap();
    let task = table
        .task("api", &TaskConfig::new().max_concurrency(N as u32))
        .unwrap();
    let app = Arc::new(App::default());
    let addr = serve(FlowctrlLayer::new(task.clone()), app.clone()).await;

    let mut streams = Vec::new();
    for _ in 0..N {
        let (response, connection) = get(addr, "/slow", None).await;
        let response = response.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        streams.push((response, connection));
    }
    assert_eq!(task.stats().in_flight, N as u64);

    // The N+1th, with the bodies still streaming: refused, inner not called.
    let (status, headers) = fetch(addr, "/", None).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    // A cap's wait is unknown to the library: the layer's default.
    assert_eq!(number(&headers, "retry-after"), Some(1));
    assert_eq!(
        headers["content-type"].to_str().unwrap(),
        "text/plain; charset=utf-8"
    );
    assert_eq!(headers.get("ratelimit-limit"), None, "no key, no rate");
    assert_eq!(app.calls.load(Ordering::SeqCst), N as u32);
    assert_eq!(task.stats().limited_concurrency, 1);

    app.open.store(true, Ordering::SeqCst);
    for (response, _connection) in streams {
        response.into_body().collect().await.unwrap();
    }
    let stats = stats_once(&task, |s| s.released_success == N as u64).await;
    assert_eq!(stats.in_flight, 0, "{stats:?}");
    assert_eq!(stats.released_success, N as u64, "{stats:?}");
    assert_eq!(stats.released_ignored + stats.released_dropped, 0);
    assert_eq!(task.check().unwrap().drift(), 0);

    // Room again.
    assert_eq!(fetch(addr, "/", None).await.0, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_gone_mid_stream_gives_its_permit_back() {
    let scratch = Scratch::new("tower-gone");
    let table = Table::open(scratch.path("t"), &TableOptions::default()).unwrap();
    let task = table
        .task("api", &TaskConfig::new().max_concurrency(1))
        .unwrap();
    let app = Arc::new(App::default());
    let addr = serve(FlowctrlLayer::new(task.clone()), app.clone()).await;

    let (response, connection) = get(addr, "/slow", None).await;
    let mut body = response.unwrap().into_body();
    let chunk = body.frame().await.unwrap().unwrap();
    assert_eq!(chunk.into_data().unwrap(), "chunk\n");
    assert_eq!(
        fetch(addr, "/", None).await.0,
        StatusCode::TOO_MANY_REQUESTS
    );

    // The client goes away mid-stream; the gate never opens.
    connection.abort();
    drop(body);
    let stats = stats_once(&task, |s| s.in_flight == 0).await;
    assert_eq!(stats.in_flight, 0, "{stats:?}");
    assert_eq!(stats.released_ignored, 1, "{stats:?}");
    assert_eq!(stats.released_success + stats.released_dropped, 0);
    assert_eq!(fetch(addr, "/", None).await.0, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_says_when_and_counts_down() {
    let scratch = Scratch::new("tower-rate");
    let table = Table::open(scratch.path("t"), &TableOptions::default()).unwrap();
    // 5 a minute: one more every 12 s.
    let task = keyed_task(
        &table,
        KeyLimits::new().rate(KeyRate::new(5.0, Duration::from_secs(60))),
    );
    let app = Arc::new(App::default());
    let layer = FlowctrlLayer::new(task.clone()).key(header(API_KEY));
    let addr = serve(layer, app.clone()).await;

    let mut remaining = Vec::new();
    for _ in 0..5 {
        let (status, headers) = fetch(addr, "/", Some("alice")).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(number(&headers, "ratelimit-limit"), Some(5));
        remaining.push(number(&headers, "ratelimit-remaining").unwrap());
    }
    assert_eq!(remaining, [4, 3, 2, 1, 0]);

    let (status, headers) = fetch(addr, "/", Some("alice")).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    let said = number(&headers, "retry-after").unwrap();
    let wait = task.key_state(b"alice").unwrap().retry_after;
    let wait = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    assert!(
        said >= 1 && (said == wait || said == wait + 1),
        "{said} vs {wait}"
    );
    assert_eq!(said, 12);
    assert_eq!(number(&headers, "ratelimit-remaining"), Some(0));
    assert_eq!(number(&headers, "ratelimit-reset"), Some(60));
    assert_eq!(app.calls.load(Ordering::SeqCst), 5);

    // The task's own rate, without a key: its wait too, not a guess.
    let unkeyed = table
        .task("slow", &TaskConfig::new().local_rate(1.0 / 30.0))
        .unwrap();
    let addr = serve(FlowctrlLayer::new(unkeyed.clone()), app.clone()).await;
    assert_eq!(fetch(addr, "/", None).await.0, StatusCode::OK);
    let (status, headers) = fetch(addr, "/", None).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    let said = number(&headers, "retry-after").unwrap();
    let wait = unkeyed.retry_after(Limited::Local, 1).unwrap();
    let wait = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    assert!(said == wait || said == wait + 1, "{said} vs {wait}");
    assert!(said >= 29, "{said}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_5xx_and_an_inner_error_are_released_as_dropped() {
    let scratch = Scratch::new("tower-5xx");
    let table = Table::open(scratch.path("t"), &TableOptions::default()).unwrap();
    let task = table
        .task("api", &TaskConfig::new().max_concurrency(8))
        .unwrap();
    let app = Arc::new(App::default());
    let addr = serve(FlowctrlLayer::new(task.clone()), app.clone()).await;

    assert_eq!(
        fetch(addr, "/fail", None).await.0,
        StatusCode::INTERNAL_SERVER_ERROR
    );
    let stats = stats_once(&task, |s| s.released_dropped == 1).await;
    assert_eq!((stats.released_dropped, stats.released_success), (1, 0));

    // The inner service fails: hyper closes the connection unanswered.
    let (response, _connection) = get(addr, "/error", None).await;
    assert!(response.is_err());
    assert_eq!(fetch(addr, "/", None).await.0, StatusCode::OK);
    let stats = stats_once(&task, |s| s.released_success == 1).await;
    assert_eq!(
        (
            stats.released_dropped,
            stats.released_success,
            stats.released_ignored
        ),
        (2, 1, 0),
        "{stats:?}"
    );
    assert_eq!(stats.in_flight, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_are_limited_apart() {
    let scratch = Scratch::new("tower-keys");
    let table = Table::open(scratch.path("t"), &TableOptions::default()).unwrap();
    let task = keyed_task(
        &table,
        KeyLimits::new().rate(KeyRate::new(3.0, Duration::from_secs(60))),
    );
    let app = Arc::new(App::default());
    let addr = serve(
        FlowctrlLayer::new(task.clone()).key(header(API_KEY)),
        app.clone(),
    )
    .await;

    for key in ["key-a", "key-b"] {
        for _ in 0..3 {
            assert_eq!(fetch(addr, "/", Some(key)).await.0, StatusCode::OK);
        }
        let (status, headers) = fetch(addr, "/", Some(key)).await;
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{key}");
        assert_eq!(number(&headers, "ratelimit-remaining"), Some(0));
    }
    // Without the header: the task's own limits only (it has none).
    let (status, headers) = fetch(addr, "/", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(headers.get("ratelimit-limit"), None);
    // A key longer than the library takes: 400, not a panic nor a 503.
    let long = "k".repeat(flowctrl::MAX_KEY_LEN + 1);
    assert_eq!(
        fetch(addr, "/", Some(&long)).await.0,
        StatusCode::BAD_REQUEST
    );

    let keys = task.key_stats().unwrap().unwrap();
    assert_eq!(keys.refused_rate, 2, "{keys:?}");
    assert_eq!(app.calls.load(Ordering::SeqCst), 7);
    let stats = stats_once(&task, |s| s.released_success == 7).await;
    assert_eq!((stats.released_success, stats.in_flight), (7, 0));
}

/// A key refused by its global rate gets its wait, and none of the key's
/// numbers on the host: they would say it has room.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_global_refusal_says_when_and_claims_no_room() {
    use flowctrl::KeyGlobal;
    let scratch = Scratch::new("tower-global");
    let table = Table::open(scratch.path("t"), &TableOptions::default()).unwrap();
    // 100 a minute on the host, 1 a day across the fleet (no store: this
    // host is the fleet).
    let day = KeyGlobal::new(KeyRate::new(1.0, Duration::from_secs(86_400)));
    let task = keyed_task(
        &table,
        KeyLimits::new()
            .rate(KeyRate::new(100.0, Duration::from_secs(60)))
            .global(day),
    );
    let app = Arc::new(App::default());
    let addr = serve(
        FlowctrlLayer::new(task.clone()).key(header(API_KEY)),
        app.clone(),
    )
    .await;
    let (status, headers) = fetch(addr, "/", Some("key-g")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(number(&headers, "ratelimit-remaining"), Some(99));
    let (status, headers) = fetch(addr, "/", Some("key-g")).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    let wait = number(&headers, "retry-after").expect("a wait");
    assert!((1..=86_400).contains(&wait), "{wait}");
    assert_eq!(headers.get("ratelimit-remaining"), None, "{headers:?}");
    assert_eq!(app.calls.load(Ordering::SeqCst), 1);
}
