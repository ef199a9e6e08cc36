//! A minimal HTTP/1.1 client connection (hyper's low-level `conn::http1`):
//! one TCP connection, kept alive, one request at a time — so "N concurrent
//! connections" means exactly N sockets to the gateway.

use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper::Request;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// The SSP2 media type of `POST /sync` (§1.1).
pub const SSP2_CONTENT_TYPE: &str = "application/vnd.syncular.sync.v2";

/// One keep-alive connection.
pub struct HttpConn {
    sender: SendRequest<Full<Bytes>>,
    host: String,
}

impl HttpConn {
    /// Connects to `addr` (TCP_NODELAY) and spawns the connection driver.
    ///
    /// Errors: connect or handshake failure.
    pub async fn connect(addr: SocketAddr) -> Result<HttpConn, String> {
        let stream = TcpStream::connect(addr)
            .await
            .map_err(|e| format!("connect {addr}: {e}"))?;
        let _ = stream.set_nodelay(true);
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| format!("HTTP handshake with {addr}: {e}"))?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(HttpConn {
            sender,
            host: addr.to_string(),
        })
    }

    /// Sends one request and reads the whole response: `(status, body)`.
    ///
    /// Errors: a transport error.
    pub async fn send(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Vec<u8>,
    ) -> Result<(u16, Bytes), String> {
        let mut req = Request::builder()
            .method(method)
            .uri(path)
            .header("host", &self.host);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let req = req
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| e.to_string())?;
        self.sender
            .ready()
            .await
            .map_err(|e| format!("HTTP connection not ready: {e}"))?;
        let resp = self
            .sender
            .send_request(req)
            .await
            .map_err(|e| format!("{method} {path}: {e}"))?;
        let status = resp.status().as_u16();
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| format!("{method} {path}: reading the body: {e}"))?
            .to_bytes();
        Ok((status, body))
    }

    /// `POST /sync` with dev-auth headers: the SSP2 response bytes.
    ///
    /// Errors: a transport error, or a non-200 status (with its §10.1 body).
    pub async fn sync(&mut self, actor: &str, partition: &str, request: Vec<u8>) -> Result<Bytes, String> {
        let (status, body) = self
            .send(
                "POST",
                "/sync",
                &[
                    ("content-type", SSP2_CONTENT_TYPE),
                    ("x-syncular-actor", actor),
                    ("x-syncular-partition", partition),
                ],
                request,
            )
            .await?;
        if status != 200 {
            return Err(format!("POST /sync: HTTP {status}: {}", String::from_utf8_lossy(&body)));
        }
        Ok(body)
    }
}

/// One `GET` on a fresh connection: `(status, body)`.
///
/// Errors: a transport error.
pub async fn get(addr: SocketAddr, path: &str) -> Result<(u16, Bytes), String> {
    HttpConn::connect(addr).await?.send("GET", path, &[], Vec::new()).await
}
