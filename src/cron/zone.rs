//! Time zones of cron entries: IANA `Area/Location` names only.
//!
//! The zone database compiled in (`chrono-tz`) also holds names the cron extension refuses:
//! abbreviations (`EST`, `PST8PDT`), fixed offsets (`Etc/GMT+5`) and the old country links
//! (`Japan`, `US/Eastern` is kept: it has an area). A fixed offset written out (`+05:00`,
//! `UTC+5`) is not in the database at all. `UTC` and `Etc/UTC` are the two spellings of UTC
//! that are accepted.

use chrono_tz::Tz;

/// The zone named `name`, or why it is refused.
pub fn parse(name: &str) -> Result<Tz, String> {
    if name.is_empty() {
        return Err(
            "timezone must not be empty: use an IANA name such as UTC or Europe/Paris".into(),
        );
    }
    if name.starts_with(['+', '-']) || name.contains(':') || looks_like_offset(name) {
        return Err(format!(
            "timezone {name:?} is a fixed UTC offset, which does not follow daylight saving time: \
             use an IANA name such as America/New_York"
        ));
    }
    let zone: Tz = match name.parse() {
        Ok(zone) => zone,
        Err(_) => {
            let hint = chrono_tz::TZ_VARIANTS
                .iter()
                .find(|z| z.name().eq_ignore_ascii_case(name))
                .map(|z| format!(" (did you mean {:?}?)", z.name()))
                .unwrap_or_default();
            return Err(format!(
                "timezone {name:?} is not an IANA time zone name{hint}: use a name such as \
                 UTC, Europe/Paris or America/New_York"
            ));
        }
    };
    if name == "UTC" || name == "Etc/UTC" {
        return Ok(zone);
    }
    if !name.contains('/') {
        return Err(format!(
            "timezone {name:?} is an abbreviation or legacy alias, not an Area/Location name: \
             use a name such as America/New_York or Asia/Tokyo"
        ));
    }
    if let Some(rest) = name.strip_prefix("Etc/") {
        return Err(format!(
            "timezone {name:?} ({rest}) is a fixed offset, which does not follow daylight saving \
             time: use an Area/Location name such as Europe/Berlin, or UTC"
        ));
    }
    Ok(zone)
}

/// `UTC+5`, `GMT-03`, `UTC+05:30`: an offset from UTC or GMT.
fn looks_like_offset(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    ["UTC", "GMT", "UT"].iter().any(|base| {
        upper
            .strip_prefix(base)
            .is_some_and(|rest| rest.starts_with(['+', '-']))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iana_area_location_names_and_utc_are_accepted() {
        for name in [
            "UTC",
            "Etc/UTC",
            "America/New_York",
            "Asia/Tokyo",
            "Asia/Kolkata",
            "Australia/Lord_Howe",
            "America/Argentina/Buenos_Aires",
            "Pacific/Apia",
        ] {
            assert_eq!(parse(name).map(|z| z.name()), Ok(name), "{name}");
        }
    }

    #[test]
    fn offsets_abbreviations_and_unknown_names_are_refused() {
        for (name, says) in [
            ("+05:00", "fixed UTC offset"),
            ("-08:00", "fixed UTC offset"),
            ("UTC+5", "fixed UTC offset"),
            ("GMT-3", "fixed UTC offset"),
            ("EST", "abbreviation"),
            ("PST", "not an IANA"),
            ("CST", "not an IANA"),
            ("EST5EDT", "abbreviation"),
            ("Japan", "abbreviation or legacy alias"),
            ("Etc/GMT+5", "fixed offset"),
            ("Etc/GMT", "fixed offset"),
            ("Mars/Olympus_Mons", "not an IANA"),
            ("america/new_york", "did you mean \"America/New_York\""),
            ("", "must not be empty"),
        ] {
            let e = parse(name).expect_err(name);
            assert!(e.contains(says), "{name}: {e}");
        }
    }
}
