//! The load tool's HTTP side: requests that fail on a non-2xx answer, and the server's
//! counters from `/metrics`.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::Value;

use crate::Bench;

impl Bench {
    pub(crate) async fn post(&self, url: &str, body: &Value) -> anyhow::Result<(Value, Duration)> {
        self.request(reqwest::Method::POST, url, Some(body)).await
    }

    /// Sends a request, fails on a non-2xx answer, and returns the answer's JSON body.
    pub(crate) async fn request(
        &self,
        method: reqwest::Method,
        url: &str,
        body: Option<&Value>,
    ) -> anyhow::Result<(Value, Duration)> {
        let started = Instant::now();
        let mut request = self.client.request(method.clone(), url);
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request
            .send()
            .await
            .with_context(|| format!("{method} {url}"))?;
        let status = response.status();
        let bytes = response.bytes().await?;
        let took = started.elapsed();
        if !status.is_success() {
            bail!(
                "{method} {url} answered {status}: {}",
                String::from_utf8_lossy(&bytes)
            );
        }
        Ok((serde_json::from_slice(&bytes)?, took))
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}{path}", self.args.url)
    }

    /// The server's FETCH counters from `/metrics`: claim statements, hand-offs and FETCH-side
    /// promotions run (`None` when the server does not publish them).
    pub(crate) async fn fetch_counters(&self) -> Option<[f64; 3]> {
        let text = self
            .client
            .get(self.url("/metrics"))
            .send()
            .await
            .ok()?
            .text()
            .await
            .ok()?;
        let sum = |name: &str, labels: &str| -> f64 {
            text.lines()
                .filter(|l| l.starts_with(name) && l.contains(labels))
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .sum()
        };
        text.contains("ojs_fetch_claim_statements_total").then(|| {
            [
                sum("ojs_fetch_claim_statements_total", ""),
                sum("ojs_fetch_handoffs_total", ""),
                sum("ojs_fetch_promotions_total", "outcome=\"ran\""),
            ]
        })
    }
}
