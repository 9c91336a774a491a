//! OpenAI-style JSON errors: `{"error": {"message", "type", "param", "code"}}` with the status
//! code a client expects for each kind of mistake.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;

#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: StatusCode,
    pub kind: &'static str,
    pub message: String,
    pub param: Option<String>,
    pub code: Option<&'static str>,
}

impl ApiError {
    fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            kind,
            message: message.into(),
            param: None,
            code: None,
        }
    }

    /// A request the server understood but will not run: 400.
    pub fn invalid(param: &str, message: impl Into<String>) -> Self {
        Self {
            param: Some(param.to_owned()),
            ..Self::new(StatusCode::BAD_REQUEST, "invalid_request_error", message)
        }
    }

    pub fn bad_json(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request_error", message)
    }

    pub fn context_exceeded(n_prompt: usize, n_ctx: usize) -> Self {
        Self {
            code: Some("context_length_exceeded"),
            ..Self::invalid(
                "messages",
                format!(
                    "the prompt is {n_prompt} tokens, but this server's context holds {n_ctx} \
                     (leaving room for at least one generated token); shorten it or restart \
                     the server with a larger -c"
                ),
            )
        }
    }

    pub fn unknown_model(asked: &str, served: &str) -> Self {
        Self {
            param: Some("model".into()),
            code: Some("model_not_found"),
            ..Self::new(
                StatusCode::NOT_FOUND,
                "invalid_request_error",
                format!("the model '{asked}' does not exist; this server serves '{served}'"),
            )
        }
    }

    pub fn unauthorized() -> Self {
        Self {
            code: Some("invalid_api_key"),
            ..Self::new(
                StatusCode::UNAUTHORIZED,
                "authentication_error",
                "missing or wrong API key: send 'Authorization: Bearer KEY' with the key the \
                 server was started with (--api-key)",
            )
        }
    }

    /// Without an API key, a request whose `Host` is not this server's (DNS rebinding).
    pub fn forbidden_host(host: &str) -> Self {
        Self::new(
            StatusCode::FORBIDDEN,
            "invalid_request_error",
            format!(
                "Host '{host}' does not name this server; use the address it is bound to, \
                 start it with --allow-host {host}, or set an API key (--api-key)"
            ),
        )
    }

    /// Without an API key, a POST whose body is not declared JSON (a cross-site form).
    pub fn not_json(given: &str) -> Self {
        Self::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "invalid_request_error",
            format!("Content-Type is '{given}'; send the body as 'Content-Type: application/json'"),
        )
    }

    /// The body did not arrive in time: 408, and the connection is closed.
    pub fn body_timeout(limit: std::time::Duration) -> Self {
        Self::new(
            StatusCode::REQUEST_TIMEOUT,
            "invalid_request_error",
            format!(
                "the request body did not arrive within {} s (--body-timeout)",
                limit.as_secs_f64()
            ),
        )
    }

    pub fn queue_full() -> Self {
        Self {
            code: Some("rate_limit_exceeded"),
            ..Self::new(
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limit_error",
                "every slot is busy and the queue is full; retry later",
            )
        }
    }

    pub fn body_rejected(status: StatusCode, message: String) -> Self {
        let kind = "invalid_request_error";
        if status == StatusCode::PAYLOAD_TOO_LARGE {
            return Self::new(status, kind, "the request body is too large");
        }
        // Anything else about reading the body is the client's: keep it a 4xx.
        let status = if status.is_client_error() {
            status
        } else {
            StatusCode::BAD_REQUEST
        };
        Self::new(status, kind, message)
    }

    pub fn not_found(path: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            format!("no endpoint {path}: see /v1/chat/completions, /v1/completions, /v1/models"),
        )
    }

    pub fn method_not_allowed() -> Self {
        Self::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "invalid_request_error",
            "method not allowed on this endpoint",
        )
    }

    /// The engine failed or is gone: the one 5xx.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "server_error", message)
    }

    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "error": {
                "message": self.message,
                "type": self.kind,
                "param": self.param,
                "code": self.code,
            }
        })
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut resp = (self.status, Json(self.to_json())).into_response();
        let headers = resp.headers_mut();
        // RFC 9110: a 401 names its scheme; a 429 says when to come back.
        match self.status {
            StatusCode::UNAUTHORIZED => {
                headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            StatusCode::TOO_MANY_REQUESTS => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            }
            _ => {}
        }
        resp
    }
}
