//! `telemetry`: the log format and where job spans are exported.

use crate::telemetry::LogFormat;
use crate::telemetry::traces::OtelVariables;

#[derive(Debug, Clone, clap::Args)]
pub struct Telemetry {
    /// Log format.
    #[arg(long, env = "OJS_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// Job traces: the standard OpenTelemetry variables.
    #[command(flatten)]
    pub otel: OtelVariables,
}

impl Default for Telemetry {
    fn default() -> Self {
        Telemetry {
            log_format: LogFormat::Text,
            otel: OtelVariables::default(),
        }
    }
}
