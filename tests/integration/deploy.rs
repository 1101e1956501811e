//! What `deploy/` ships, checked against the server it deploys: every query of the Grafana
//! dashboard and of the Prometheus alert rules reads metrics (and labels) that `/metrics`
//! really serves; the KEDA ScaledObject reads a number from the scaling endpoint with the key
//! its comments say to create; the Kubernetes manifest's probes and settings exist. (CI also
//! validates the manifests against the Kubernetes schemas and the rules with promtool:
//! `.ci/deploy`.)

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};

use crate::support::{TestApp, job};

fn read(path: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(path))
        .unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Every `expr` of the dashboard's panels and variables.
fn dashboard_queries() -> Vec<String> {
    let dashboard: Value = serde_json::from_str(&read("deploy/grafana/ojsd.json")).unwrap();
    let mut queries = Vec::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().into_iter().flatten() {
            queries.push(target["expr"].as_str().unwrap().to_owned());
        }
    }
    for variable in dashboard["templating"]["list"].as_array().unwrap() {
        if let Some(query) = variable["query"]["query"].as_str() {
            queries.push(query.to_owned());
        }
    }
    assert!(queries.len() >= 20, "the dashboard's queries: {queries:?}");
    queries
}

/// Every `expr:` of the alert rules (a value on its line, or a folded block below it).
fn alert_queries() -> Vec<String> {
    let text = read("deploy/prometheus/alerts.yaml");
    let lines: Vec<&str> = text.lines().collect();
    let mut queries = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let Some(value) = line.trim_start().strip_prefix("expr:") else {
            continue;
        };
        let value = value.trim();
        if value == ">" || value == "|" {
            let indent = line.len() - line.trim_start().len();
            let block: Vec<&str> = lines[i + 1..]
                .iter()
                .take_while(|l| l.len() - l.trim_start().len() > indent)
                .map(|l| l.trim())
                .collect();
            queries.push(block.join(" "));
        } else {
            queries.push(value.to_owned());
        }
    }
    assert!(queries.len() >= 6, "the alert rules' queries: {queries:?}");
    queries
}

/// The `ojs_*` metrics a query reads, each with the label names its selector names.
fn metrics_read(query: &str) -> Vec<(String, Vec<String>)> {
    let mut read = Vec::new();
    let bytes = query.as_bytes();
    let mut i = 0;
    while let Some(at) = query[i..].find("ojs_").map(|a| a + i) {
        let starts_word =
            at == 0 || !(bytes[at - 1].is_ascii_alphanumeric() || bytes[at - 1] == b'_');
        let end = query[at..]
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .map_or(query.len(), |e| at + e);
        i = end;
        if !starts_word {
            continue;
        }
        let name = query[at..end].to_owned();
        let mut labels = Vec::new();
        if query[end..].starts_with('{') {
            let close = query[end..].find('}').unwrap() + end;
            for matcher in query[end + 1..close].split(',') {
                let label: String = matcher
                    .trim()
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if !label.is_empty() {
                    labels.push(label);
                }
            }
            i = close;
        }
        read.push((name, labels));
    }
    read
}

/// Series names in the Prometheus text format, with the label names each carries.
fn served(metrics: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut served: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in metrics
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let name_end = line.find(['{', ' ']).unwrap_or(line.len());
        let labels = served.entry(line[..name_end].to_owned()).or_default();
        if line[name_end..].starts_with('{') {
            let close = line.find('}').unwrap();
            for pair in line[name_end + 1..close].split("\",") {
                if let Some((label, _)) = pair.split_once('=') {
                    labels.insert(label.trim().to_owned());
                }
            }
        }
    }
    served
}

/// Traffic that makes every series of the dashboard and the rules appear: jobs enqueued,
/// claimed, completed, retried and failed for good, a registered worker, a maintenance pass.
async fn traffic(app: &TestApp) {
    app.register(json!({"worker_id": "w1", "queues": ["email"], "concurrency": 2}))
        .await
        .expect(201);
    for _ in 0..3 {
        app.push(job("mail.send", "email")).await;
    }
    let mut once = job("mail.send", "email");
    once["options"] = json!({"retry": {"max_attempts": 1}});
    app.push(once).await;
    let done = app.fetch_one("email", "w1").await;
    app.ack_job(&done, "w1").await.expect(200);
    for _ in 0..3 {
        let jobs = app
            .fetch(json!({"queues": ["email"], "worker_id": "w1", "count": 1}))
            .await;
        let Some(claimed) = jobs.first() else { break };
        app.nack(json!({"job_id": claimed["id"], "worker_id": "w1",
                        "error": {"message": "no"}}))
            .await
            .expect(200);
    }
    // One left waiting: the latency gauge has a series for a queue with an available job.
    app.push(job("mail.send", "email")).await;
}

#[tokio::test]
async fn every_dashboard_and_alert_query_reads_what_metrics_serves() {
    let app = TestApp::spawn_with(|c| {
        c.maintenance.enabled = true;
    })
    .await;
    traffic(&app).await;
    // The leader's first passes (ojs_leader, the maintenance counters) and the gauges' read.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let metrics = loop {
        let metrics = app.get("/metrics").await.expect(200).text;
        let series = served(&metrics);
        let ready = [
            "ojs_leader",
            "ojs_maintenance_errors_total",
            "ojs_queue_workers",
        ]
        .iter()
        .all(|m| series.contains_key(*m));
        if ready || std::time::Instant::now() > deadline {
            break metrics;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let series = served(&metrics);
    let mut missing = Vec::new();
    for (source, query) in dashboard_queries()
        .into_iter()
        .map(|q| ("dashboard", q))
        .chain(alert_queries().into_iter().map(|q| ("alerts", q)))
    {
        for (name, labels) in metrics_read(&query) {
            match series.get(&name) {
                None => missing.push(format!("{source}: {name} is not served ({query})")),
                Some(served_labels) => {
                    for label in labels.iter().filter(|l| !served_labels.contains(*l)) {
                        missing.push(format!("{source}: {name} has no label {label} ({query})"));
                    }
                }
            }
        }
    }
    assert!(
        missing.is_empty(),
        "{}\n\nserved: {:?}",
        missing.join("\n"),
        series.keys().collect::<Vec<_>>()
    );
}

#[test]
fn the_query_reader_finds_names_and_labels() {
    assert_eq!(
        metrics_read(
            r#"sum by (queue) (rate(ojs_job_failed_total{queue=~"$queue", type!="x"}[5m])) / ojs_leader"#
        ),
        vec![
            (
                "ojs_job_failed_total".to_owned(),
                vec!["queue".to_owned(), "type".to_owned()]
            ),
            ("ojs_leader".to_owned(), vec![])
        ]
    );
    let served = served("# HELP x\nojs_a{queue=\"q\",state=\"s\"} 1\nojs_b 2\n");
    assert_eq!(
        served["ojs_a"],
        BTreeSet::from(["queue".to_owned(), "state".to_owned()])
    );
    assert!(served["ojs_b"].is_empty());
}

/// `key: value` of the first line of `text` naming `key` (quotes removed).
fn yaml_value<'a>(text: &'a str, key: &str) -> &'a str {
    text.lines()
        .find_map(|l| l.trim().strip_prefix(&format!("{key}:")))
        .unwrap_or_else(|| panic!("{key} in the manifest"))
        .trim()
        .trim_matches('"')
}

#[tokio::test]
async fn the_scaled_object_reads_a_number_with_the_key_it_names() {
    let manifest = read("deploy/kubernetes/worker-autoscaling.yaml");
    let url = yaml_value(&manifest, "url");
    let path = &url[url.find("/ojs/").expect("an ojsd path")..];
    let location = yaml_value(&manifest, "valueLocation");
    assert_eq!(yaml_value(&manifest, "authMode"), "bearer");
    yaml_value(&manifest, "targetValue")
        .parse::<f64>()
        .expect("a numeric target");
    // KEDA applies `fallback` only to AverageValue metrics.
    assert!(manifest.contains("fallback:"));
    assert_eq!(yaml_value(&manifest, "metricType"), "AverageValue");
    // The key its comment says to create: a worker key limited to the queue.
    let queue = path.rsplit('/').next().unwrap();
    assert!(
        manifest.contains(&format!("--role worker --queues {queue}")),
        "the manifest says which key to make"
    );

    let app = TestApp::spawn().await;
    for _ in 0..4 {
        app.push(job("mail.send", queue)).await;
    }
    let admin = app
        .create_key(None, json!({"role": "admin", "name": "ops"}))
        .await;
    let key = app
        .create_key(Some(&admin), json!({"role": "worker", "queues": [queue]}))
        .await;
    let answer = app
        .as_key(Some(&key), Method::GET, path, None)
        .await
        .expect(200)
        .json;
    // GJSON: a dotted path (no wildcards or escapes in what we ship).
    let value = location.split('.').fold(&answer, |v, part| &v[part]);
    assert_eq!(value.as_f64(), Some(4.0), "{location} of {answer}");
}

#[tokio::test]
async fn the_deployments_probes_answer_and_its_settings_exist() {
    let manifest = read("deploy/kubernetes/ojsd.yaml");
    let settings: BTreeSet<String> =
        std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/config"))
            .unwrap()
            .flat_map(|e| {
                let text = std::fs::read_to_string(e.unwrap().path()).unwrap();
                text.split("env = \"")
                    .skip(1)
                    .map(|rest| rest[..rest.find('"').unwrap()].to_owned())
                    .collect::<Vec<_>>()
            })
            .collect();
    let named: Vec<&str> = manifest
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- name: "))
        .filter(|n| n.chars().all(|c| c.is_ascii_uppercase() || c == '_'))
        .collect();
    assert!(named.contains(&"DATABASE_URL") && named.contains(&"OJS_LISTEN_ADDR"));
    for name in named {
        assert!(settings.contains(name), "{name} is a setting of ojsd");
    }
    let app = TestApp::spawn().await;
    for probe in manifest
        .lines()
        .filter_map(|l| l.trim().strip_prefix("path: "))
        .filter(|p| p.starts_with('/'))
    {
        let status = app.get(probe).await.status;
        assert_eq!(status, 200, "{probe}");
    }
}
