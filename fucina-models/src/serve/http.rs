//! The HTTP front of the server: accepts connections under a limit, gives each request a
//! deadline for its headers (which also closes idle keep-alive connections and slowloris
//! clients), a deadline for every blocked write (a client that stops reading), and shuts
//! down gracefully: on the signal it stops accepting, lets requests in flight finish, and
//! closes whatever is left when the grace period ends.

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};

/// Limits of the HTTP front.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    /// Connections served at once; more get `503` and are closed.
    pub max_connections: usize,
    /// Time a client has to send a request's headers, counted from when the connection
    /// is ready for the next request (so it is also the idle keep-alive timeout).
    pub header_timeout: Duration,
    /// Time one write may stay blocked (a client that stops reading its stream).
    pub write_timeout: Duration,
    /// After the shutdown signal, how long requests in flight may take to finish.
    pub shutdown_grace: Duration,
}

impl Default for HttpOptions {
    fn default() -> Self {
        HttpOptions {
            max_connections: 256,
            header_timeout: Duration::from_secs(10),
            write_timeout: Duration::from_secs(30),
            shutdown_grace: Duration::from_secs(5),
        }
    }
}

/// Serves `app` on `listener` until `shutdown` completes, then drains for at most
/// `opts.shutdown_grace`.
pub async fn serve_http(
    listener: TcpListener,
    app: Router,
    opts: HttpOptions,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let slots = Arc::new(Semaphore::new(opts.max_connections.max(1)));
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut tasks = tokio::task::JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            r = listener.accept() => match r {
                Ok((s, _)) => s,
                // Out of file descriptors and the like: back off instead of spinning.
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
            // Reap finished connections so the set does not grow with the server's life.
            Some(_) = tasks.join_next(), if !tasks.is_empty() => continue,
        };
        let _ = stream.set_nodelay(true);
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            tasks.spawn(refuse(stream));
            continue;
        };
        let app = app.clone();
        let mut stop = stop_rx.clone();
        let opts = opts.clone();
        tasks.spawn(async move {
            let _permit = permit;
            let io = TokioIo::new(WriteDeadline::new(stream, opts.write_timeout));
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(opts.header_timeout)
                .max_buf_size(64 * 1024)
                .serve_connection(io, TowerToHyperService::new(app));
            tokio::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => return,
                _ = stop.wait_for(|s| *s) => conn.as_mut().graceful_shutdown(),
            }
            let _ = conn.await;
        });
    }
    drop(listener);
    let _ = stop_tx.send(true);
    let drain = async { while tasks.join_next().await.is_some() {} };
    if tokio::time::timeout(opts.shutdown_grace, drain).await.is_err() {
        tasks.abort_all();
    }
    Ok(())
}

/// How long a refused connection is drained after its `503` (see [`refuse`]).
const REFUSE_LINGER: Duration = Duration::from_secs(1);

/// Answers a connection over the limit with `503` and closes it. Closing a socket with the
/// client's request still unread makes the kernel reset the connection, and the reset
/// discards the `503` before the client reads it (every probe of a full server saw a reset
/// before this). So the write side is shut first and whatever the client sends is read and
/// dropped until it closes or [`REFUSE_LINGER`] passes (a lingering close).
async fn refuse(mut stream: TcpStream) {
    const BODY: &str = r#"{"error":{"message":"too many connections","type":"server_error","param":null,"code":"too_many_connections"}}"#;
    let msg = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\nretry-after: 1\r\n\r\n{BODY}",
        BODY.len()
    );
    let _ = tokio::time::timeout(Duration::from_secs(1), stream.write_all(msg.as_bytes())).await;
    let _ = stream.shutdown().await;
    let mut sink = [0u8; 4096];
    let drain = async {
        while let Ok(n) = stream.read(&mut sink).await {
            if n == 0 {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(REFUSE_LINGER, drain).await;
}

/// A stream whose writes fail with `TimedOut` once one has been blocked for `limit`.
struct WriteDeadline<S> {
    inner: S,
    limit: Duration,
    blocked: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<S> WriteDeadline<S> {
    fn new(inner: S, limit: Duration) -> Self {
        WriteDeadline { inner, limit, blocked: None }
    }

    /// Passes a write's outcome through: a pending write becomes a timeout error once it
    /// has been pending for the limit; any progress resets the clock.
    fn timed<T>(&mut self, r: Poll<std::io::Result<T>>, cx: &mut Context<'_>) -> Poll<std::io::Result<T>> {
        if r.is_ready() {
            self.blocked = None;
            return r;
        }
        let limit = self.limit;
        let sleep = self.blocked.get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        match sleep.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the client stopped reading: write timed out",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for WriteDeadline<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for WriteDeadline<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.timed(r, cx)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let r = Pin::new(&mut self.inner).poll_flush(cx);
        self.timed(r, cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.timed(r, cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}
