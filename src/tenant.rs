//! Tenants ([OJS multi-tenancy], the shared-queue model): who a job, workflow, worker or cron
//! entry belongs to, and the rules a tenant id follows.
//!
//! A request acts as a tenant when its API key is bound to one or it carries `X-OJS-Tenant`;
//! `http::tenancy` decides, for every route, what such a request may see and touch.
//!
//! [OJS multi-tenancy]: https://github.com/openjobspec/spec/blob/main/spec/ojs-multi-tenancy.md

/// Longest tenant id, in bytes.
pub const MAX_ID_LEN: usize = 255;

/// Whether `tenant` is a tenant id: a letter or digit, then letters, digits, `.`, `_`, `:` or
/// `-`, at most [`MAX_ID_LEN`] bytes (the multi-tenancy extension's format).
pub fn is_valid_id(tenant: &str) -> bool {
    tenant.len() <= MAX_ID_LEN
        && tenant
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphanumeric())
        && tenant
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
}

/// Why `tenant` is not a tenant id.
pub fn invalid_id_message(tenant: &str) -> String {
    format!(
        "tenant {:?} is invalid: a letter or digit, then letters, digits, '.', '_', ':' or '-', at most 255 bytes",
        tenant.chars().take(300).collect::<String>()
    )
}

/// Whether something owned by `owner` (`None`: by no tenant) is visible to a request acting as
/// `tenant` (`None`: acting as no tenant, which sees everything).
pub fn visible(tenant: Option<&str>, owner: Option<&str>) -> bool {
    tenant.is_none_or(|t| owner == Some(t))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_follow_the_extension_format() {
        for ok in ["a", "acme-corp", "t_1.2:x", "9", &"x".repeat(255)] {
            assert!(is_valid_id(ok), "{ok}");
        }
        for bad in ["", "-a", ".a", "a b", "ü", "a/b", &"x".repeat(256)] {
            assert!(!is_valid_id(bad), "{bad}");
        }
    }

    #[test]
    fn a_tenant_sees_only_its_own_and_no_tenant_sees_everything() {
        assert!(visible(None, None));
        assert!(visible(None, Some("a")));
        assert!(visible(Some("a"), Some("a")));
        assert!(!visible(Some("a"), Some("b")));
        assert!(!visible(Some("a"), None));
        // A tenant-fair queue tags jobs without a tenant with ''.
        assert!(!visible(Some("a"), Some("")));
    }
}
