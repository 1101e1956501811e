//! Request bodies a response leaves unread.
//!
//! Many answers come before the body is read: a refusal by the key check or the content type,
//! an unknown route, a route that takes no body, a database outage, an oversized body cut
//! short. hyper closes a connection whose request body was not read to the end, so without
//! care such an answer kills the connection: a client that writes its whole body before it
//! reads meets a broken pipe, and a keep-alive client's next request finds a closed socket.
//!
//! So the request middleware [watches](watch) each body. When the handler drops it unread,
//! the answer goes out at once and the rest of the body is read and thrown away in the
//! background ([`discard`]), within [`DISCARD_MAX_BYTES`] and [`DISCARD_IDLE`]: the connection
//! then serves the next request. A rest that is larger, of unknown size, or held behind
//! `Expect: 100-continue` is still discarded as far as the limits allow (so the client can
//! finish writing and read the answer), but the answer says `Connection: close`.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::http::{HeaderValue, header};
use axum::response::Response;
use http_body::{Body as _, Frame, SizeHint};
use http_body_util::BodyExt;
use tokio::sync::oneshot;

/// Most bytes of an unread body discarded to keep its connection.
pub const DISCARD_MAX_BYTES: u64 = 64 << 20;

/// Longest wait for each part of an unread body being discarded.
pub const DISCARD_IDLE: Duration = Duration::from_secs(2);

/// Longest time spent discarding one body.
const DISCARD_TOTAL: Duration = Duration::from_secs(10);

/// A request body that hands itself back when dropped before its end.
struct Watched {
    inner: Body,
    ended: bool,
    back: Option<oneshot::Sender<Body>>,
}

impl http_body::Body for Watched {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if matches!(polled, Poll::Ready(None | Some(Err(_)))) {
            self.ended = true;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        if !self.ended
            && !self.inner.is_end_stream()
            && let Some(back) = self.back.take()
        {
            let _ = back.send(std::mem::replace(&mut self.inner, Body::empty()));
        }
    }
}

/// The rest of a watched body, once the request is done with.
pub struct Unread {
    /// `None`: the request had no body.
    returned: Option<oneshot::Receiver<Body>>,
    expects_continue: bool,
}

/// Watches the body of `req`: [`Unread::settle`] gets back what the handler left of it. A
/// request without a body (most GETs) is passed on as it is.
pub fn watch(req: Request) -> (Request, Unread) {
    if req.body().is_end_stream() {
        return (
            req,
            Unread {
                returned: None,
                expects_continue: false,
            },
        );
    }
    let expects_continue = req
        .headers()
        .get(header::EXPECT)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    let (back, returned) = oneshot::channel();
    let req = req.map(|inner| {
        Body::new(Watched {
            inner,
            ended: false,
            back: Some(back),
        })
    });
    (
        req,
        Unread {
            returned: Some(returned),
            expects_continue,
        },
    )
}

impl Unread {
    /// Discards the unread rest of the body, if any, in the background; `response` says
    /// `Connection: close` unless the whole rest fits in the limits.
    pub fn settle(self, response: &mut Response) {
        let Some(Ok(rest)) = self.returned.map(|mut returned| returned.try_recv()) else {
            return;
        };
        if self.expects_continue {
            // The client waits for a go-ahead before it sends the body: it sends nothing.
            close(response);
            return;
        }
        let fits = rest
            .size_hint()
            .exact()
            .is_some_and(|left| left <= DISCARD_MAX_BYTES);
        if !fits {
            close(response);
        }
        tokio::spawn(discard(rest));
    }
}

fn close(response: &mut Response) {
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
}

/// Reads `body` to its end and drops what it reads, within the limits; `true` when it ended.
pub async fn discard(mut body: Body) -> bool {
    let deadline = tokio::time::Instant::now() + DISCARD_TOTAL;
    let mut read = 0u64;
    loop {
        let wait =
            DISCARD_IDLE.min(deadline.saturating_duration_since(tokio::time::Instant::now()));
        match tokio::time::timeout(wait, body.frame()).await {
            Ok(None) => return true,
            Ok(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    read += data.len() as u64;
                    if read > DISCARD_MAX_BYTES {
                        return false;
                    }
                }
            }
            Ok(Some(Err(_))) | Err(_) => return false,
        }
    }
}
