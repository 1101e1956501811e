//! When a cron entry fires: its expression read into a [`Schedule`], and the schedule walked
//! as a sequence of [`Occurrence`]s.
//!
//! A calendar schedule is walked on the wall clock of the entry's zone, never on instants, so
//! daylight saving time needs no special case besides mapping each wall-clock time to its
//! instant:
//! - a wall-clock time that occurs twice (the hour repeated when clocks go back) is one
//!   occurrence, at its first instant: the walk visits each wall-clock time once;
//! - a wall-clock time that does not exist (the hour skipped when clocks go forward) is an
//!   occurrence that does not fire ([`Occurrence::exists`] is false); it falls due at the
//!   instant of the change, when the firer records it as skipped.
//!
//! `@every <duration>` schedules are walked on instants: every `duration` from the anchor (the
//! registration, then each occurrence), whole seconds only.

use chrono::{DateTime, NaiveDateTime, TimeDelta, TimeZone, Utc};
use chrono_tz::Tz;
use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};

/// Names of the fields of a 5-field expression; a 6-field one starts with `second`.
const FIELDS: [&str; 5] = ["minute", "hour", "day-of-month", "month", "day-of-week"];

/// The `@` aliases and the expressions they stand for.
const ALIASES: [(&str, &str); 7] = [
    ("@yearly", "0 0 1 1 *"),
    ("@annually", "0 0 1 1 *"),
    ("@monthly", "0 0 1 * *"),
    ("@weekly", "0 0 * * 0"),
    ("@daily", "0 0 * * *"),
    ("@midnight", "0 0 * * *"),
    ("@hourly", "0 * * * *"),
];

/// Longest `@every` interval: ten years.
const MAX_EVERY_SECS: i64 = 10 * 366 * 24 * 3600;

/// Most occurrences one catch-up walks one by one before it jumps to the latest due one.
const CATCH_UP_STEPS: u64 = 10_000;

/// A parsed cron expression in its zone.
#[derive(Debug, Clone)]
pub struct Schedule {
    kind: Kind,
    zone: Tz,
}

#[derive(Debug, Clone)]
enum Kind {
    /// Wall-clock fields (5 or 6 of them, or an alias of 5).
    Calendar(Box<Cron>),
    /// `@every`: a fixed interval on the time line.
    Every(TimeDelta),
}

/// One occurrence of a schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Occurrence {
    /// The wall-clock time in the entry's zone (UTC for `@every`).
    pub local: NaiveDateTime,
    /// When it falls due: its instant, the first one when the wall-clock time occurs twice;
    /// for a wall-clock time that does not exist, the instant the clocks skipped it.
    pub at: DateTime<Utc>,
    /// False for a wall-clock time skipped by a change to daylight saving time: it never fires.
    pub exists: bool,
}

/// What came due between an entry's next occurrence and now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Due {
    /// The occurrence to fire: the latest due one that exists (after downtime, the one
    /// catch-up run). `None` when every due occurrence was skipped by a clock change.
    pub fire: Option<Occurrence>,
    /// Due occurrences before `fire` that will not fire (at most one catch-up run).
    pub missed: u64,
    /// The first due occurrence skipped by a clock change, and how many were.
    pub skipped: Option<(Occurrence, u64)>,
    /// The first occurrence after now (`None`: the schedule never fires again).
    pub next: Option<Occurrence>,
}

impl Schedule {
    /// Reads an expression: 5 fields (`minute hour day-of-month month day-of-week`), 6 with a
    /// leading `second`, an `@` alias, or `@every <duration>`. The error names the field.
    pub fn parse(expression: &str, zone: Tz) -> Result<Schedule, String> {
        let text = expression.trim();
        if text.is_empty() {
            return Err("expression must not be empty".into());
        }
        let kind = if let Some(alias) = text.strip_prefix('@') {
            let lower = alias.to_ascii_lowercase();
            if let Some(duration) = lower.strip_prefix("every") {
                Kind::Every(parse_every(duration.trim())?)
            } else {
                match ALIASES.iter().find(|(name, _)| name[1..] == lower) {
                    Some((_, fields)) => Kind::Calendar(Box::new(parse_fields(fields)?)),
                    None => {
                        return Err(format!(
                            "unknown alias @{alias}: use @yearly, @annually, @monthly, @weekly, \
                             @daily, @midnight, @hourly or @every <duration>"
                        ));
                    }
                }
            }
        } else {
            Kind::Calendar(Box::new(parse_fields(text)?))
        };
        Ok(Schedule { kind, zone })
    }

    /// The zone the schedule is read in.
    pub fn zone(&self) -> Tz {
        self.zone
    }

    /// The first occurrence after instant `t`: where a new (or changed) entry starts.
    /// `@every` counts from `t` (rounded up to a whole second).
    pub fn first_after(&self, t: DateTime<Utc>) -> Option<Occurrence> {
        match &self.kind {
            Kind::Every(interval) => {
                let anchor = ceil_to_second(t);
                let at = anchor.checked_add_signed(*interval)?;
                Some(utc_occurrence(at))
            }
            Kind::Calendar(cron) => {
                let local = self.zone.from_utc_datetime(&t.naive_utc()).naive_local();
                let mut o = self.at_local(next_match(cron, &local)?);
                // In an hour repeated by a clock change, the walk may first meet wall-clock
                // times whose (first) instant has passed.
                while o.at <= t {
                    o = self.following(&o)?;
                }
                Some(o)
            }
        }
    }

    /// The occurrence after `o`.
    pub fn following(&self, o: &Occurrence) -> Option<Occurrence> {
        match &self.kind {
            Kind::Every(interval) => Some(utc_occurrence(o.at.checked_add_signed(*interval)?)),
            Kind::Calendar(cron) => Some(self.at_local(next_match(cron, &o.local)?)),
        }
    }

    /// The occurrence with wall-clock time `local` (as stored with an entry).
    pub fn occurrence(&self, local: NaiveDateTime) -> Occurrence {
        match self.kind {
            Kind::Every(_) => utc_occurrence(local.and_utc()),
            Kind::Calendar(_) => self.at_local(local),
        }
    }

    /// The first occurrence at or after `o` that fires (what an entry shows as its next run).
    pub fn firing_from(&self, o: &Occurrence) -> Option<Occurrence> {
        let mut o = *o;
        // A clock change skips at most a day of wall-clock times.
        for _ in 0..=CATCH_UP_STEPS {
            if o.exists {
                return Some(o);
            }
            o = self.following(&o)?;
        }
        None
    }

    /// What came due from `from` (an entry's next occurrence) up to `now`: the one occurrence
    /// to fire, those it stands for, the skipped ones, and where the schedule goes on.
    pub fn due(&self, from: &Occurrence, now: DateTime<Utc>) -> Due {
        let mut due = Due {
            fire: None,
            missed: 0,
            skipped: None,
            next: Some(*from),
        };
        if let Kind::Every(interval) = &self.kind {
            // Arithmetic: the occurrences are from.at + k * interval.
            if from.at > now {
                return due;
            }
            let step = interval.num_seconds().max(1);
            let k = (now - from.at).num_seconds() / step;
            let fire = from.at + TimeDelta::seconds(k * step);
            due.fire = Some(utc_occurrence(fire));
            due.missed = u64::try_from(k).unwrap_or(0);
            due.next = fire.checked_add_signed(*interval).map(utc_occurrence);
            return due;
        }
        let mut o = *from;
        let mut steps = 0;
        while o.at <= now {
            if o.exists {
                if due.fire.is_some() {
                    due.missed += 1;
                }
                due.fire = Some(o);
            } else {
                match &mut due.skipped {
                    Some((_, n)) => *n += 1,
                    None => due.skipped = Some((o, 1)),
                }
            }
            steps += 1;
            if steps == CATCH_UP_STEPS {
                // Long downtime of a frequent entry: jump to the latest due occurrence instead
                // of walking every one (the count of missed ones is then a lower bound).
                if let Some(latest) = self.latest_firing(now)
                    && due.fire.is_none_or(|f| latest.at > f.at)
                {
                    if due.fire.is_some() {
                        due.missed += 1;
                    }
                    due.fire = Some(latest);
                }
                due.next = self.first_after(now);
                break;
            }
            match self.following(&o) {
                Some(next) => o = next,
                None => {
                    due.next = None;
                    break;
                }
            }
            due.next = Some(o);
        }
        due
    }

    /// The latest occurrence at or before `now` that fires (calendar schedules).
    fn latest_firing(&self, now: DateTime<Utc>) -> Option<Occurrence> {
        let Kind::Calendar(cron) = &self.kind else {
            return None;
        };
        let mut local = self.zone.from_utc_datetime(&now.naive_utc()).naive_local();
        for _ in 0..CATCH_UP_STEPS {
            let found = cron.find_previous_occurrence(&local, true).ok()?;
            let o = self.at_local(found);
            if o.exists && o.at <= now {
                return Some(o);
            }
            local = found - TimeDelta::seconds(1);
        }
        None
    }

    /// The occurrence of a calendar schedule at wall-clock time `local`.
    fn at_local(&self, local: NaiveDateTime) -> Occurrence {
        match self.zone.from_local_datetime(&local) {
            chrono::LocalResult::Single(t) => Occurrence {
                local,
                at: t.with_timezone(&Utc),
                exists: true,
            },
            chrono::LocalResult::Ambiguous(a, b) => Occurrence {
                local,
                at: a.min(b).with_timezone(&Utc),
                exists: true,
            },
            chrono::LocalResult::None => Occurrence {
                local,
                at: self.skipped_at(local),
                exists: false,
            },
        }
    }

    /// The instant at which the clocks skipped over `local` (a wall-clock time that does not
    /// exist): the first instant whose wall-clock time is later.
    fn skipped_at(&self, local: NaiveDateTime) -> DateTime<Utc> {
        let wall = |t: DateTime<Utc>| self.zone.from_utc_datetime(&t.naive_utc()).naive_local();
        // Read with UTC as its zone, `local` is within a day of the change (no zone is more
        // than a day off UTC, and no skip is longer than one).
        let mut lo = local.and_utc() - TimeDelta::days(2);
        let mut hi = local.and_utc() + TimeDelta::days(2);
        while hi - lo > TimeDelta::seconds(1) {
            let mid = lo + TimeDelta::seconds((hi - lo).num_seconds() / 2);
            if wall(mid) > local {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        hi
    }
}

/// The next wall-clock time after `local` that the fields match.
fn next_match(cron: &Cron, local: &NaiveDateTime) -> Option<NaiveDateTime> {
    cron.find_next_occurrence(local, false).ok()
}

fn utc_occurrence(at: DateTime<Utc>) -> Occurrence {
    Occurrence {
        local: at.naive_utc(),
        at,
        exists: true,
    }
}

fn ceil_to_second(t: DateTime<Utc>) -> DateTime<Utc> {
    let whole = t.timestamp();
    let at = if t.timestamp_subsec_nanos() == 0 {
        whole
    } else {
        whole + 1
    };
    DateTime::from_timestamp(at, 0).unwrap_or(t)
}

/// Reads 5 or 6 whitespace-separated fields; on an error, names the first bad field.
fn parse_fields(text: &str) -> Result<Cron, String> {
    let tokens: Vec<&str> = text.split_whitespace().collect();
    let names: Vec<&str> = match tokens.len() {
        5 => FIELDS.to_vec(),
        6 => std::iter::once("second").chain(FIELDS).collect(),
        n => {
            return Err(format!(
                "expected 5 fields (minute hour day-of-month month day-of-week) or 6 (a leading \
                 second, then those five), got {n}"
            ));
        }
    };
    let parser = CronParser::builder()
        .seconds(Seconds::Optional)
        .year(Year::Disallowed)
        .build();
    for (token, name) in tokens.iter().zip(&names) {
        // Letters are month and weekday names or L/W; `?` is "any"; `+` (an AND of the
        // day fields) is not standard cron and is refused.
        if let Some(c) = token
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || "*,-/#?".contains(*c)))
        {
            return Err(format!("the {name} field {token:?} contains {c:?}"));
        }
    }
    match parser.parse(&tokens.join(" ")) {
        Ok(cron) => {
            // A pattern such as `0 0 30 2 *` is valid field by field but never matches.
            if next_match(&cron, &DateTime::UNIX_EPOCH.naive_utc()).is_none() {
                return Err(format!("{text:?} never matches a date"));
            }
            Ok(cron)
        }
        Err(whole) => {
            // Try each field alone, every other field `*`, to name the bad one.
            for (i, name) in names.iter().enumerate() {
                let alone: Vec<&str> = (0..tokens.len())
                    .map(|j| if j == i { tokens[j] } else { "*" })
                    .collect();
                if let Err(e) = parser.parse(&alone.join(" ")) {
                    return Err(format!("the {name} field {:?} is invalid: {e}", tokens[i]));
                }
            }
            Err(format!("{text:?} is not a valid cron expression: {whole}"))
        }
    }
}

/// A Go duration (`90s`, `1h30m`, `1.5h`, `500ms`): a whole number of seconds, at least one.
fn parse_every(text: &str) -> Result<TimeDelta, String> {
    let usage = "use @every with a duration such as 30s, 5m, 1h30m (whole seconds, at least 1s)";
    if text.is_empty() {
        return Err(format!("@every needs a duration: {usage}"));
    }
    let mut nanos: f64 = 0.0;
    let mut rest = text;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, after) = rest.split_at(number_len);
        let unit_len = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let (unit, after) = after.split_at(unit_len);
        let value: f64 = number
            .parse()
            .map_err(|_| format!("@every {text:?} is not a duration: {usage}"))?;
        let scale = match unit {
            "ns" => 1.0,
            "us" | "µs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return Err(format!("@every {text:?} is not a duration: {usage}")),
        };
        nanos += value * scale;
        rest = after;
    }
    let secs = nanos / 1e9;
    if secs < 1.0 {
        return Err(format!(
            "@every {text} is shorter than a second: cron entries fire at most once a second"
        ));
    }
    if secs.fract() != 0.0 {
        return Err(format!("@every {text} is not a whole number of seconds"));
    }
    if secs > MAX_EVERY_SECS as f64 {
        return Err(format!("@every {text} is longer than ten years"));
    }
    Ok(TimeDelta::seconds(secs as i64))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        s.parse().expect("an RFC 3339 instant")
    }

    fn schedule(expression: &str, zone: &str) -> Schedule {
        Schedule::parse(expression, zone.parse().expect("zone")).expect(expression)
    }

    /// The instants of the first `n` occurrences after `from` that fire.
    fn fires(s: &Schedule, from: &str, n: usize) -> Vec<String> {
        let mut out = Vec::new();
        let mut o = s.first_after(at(from)).expect("an occurrence");
        while out.len() < n {
            if o.exists {
                out.push(o.at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
            }
            o = s.following(&o).expect("an occurrence");
        }
        out
    }

    #[test]
    fn five_and_six_fields_names_and_aliases() {
        let s = schedule("*/15 9-10 * JAN-mar mon-FRI", "UTC");
        assert_eq!(
            fires(&s, "2026-01-02T10:40:00Z", 3),
            [
                "2026-01-02T10:45:00Z",
                "2026-01-05T09:00:00Z",
                "2026-01-05T09:15:00Z"
            ]
        );
        let s = schedule("*/20 * * * * *", "UTC");
        assert_eq!(
            fires(&s, "2026-01-01T00:00:00Z", 3),
            [
                "2026-01-01T00:00:20Z",
                "2026-01-01T00:00:40Z",
                "2026-01-01T00:01:00Z"
            ]
        );
        // 0 and 7 are Sunday; 2026-03-01 is a Sunday.
        for sunday in ["0 12 * * 0", "0 12 * * 7", "0 12 * * SUN", "@weekly"] {
            let first = &fires(&schedule(sunday, "UTC"), "2026-02-27T00:00:00Z", 1)[0];
            assert!(first.starts_with("2026-03-01T"), "{sunday}: {first}");
        }
        for (alias, first) in [
            ("@yearly", "2027-01-01T00:00:00Z"),
            ("@annually", "2027-01-01T00:00:00Z"),
            ("@monthly", "2026-12-01T00:00:00Z"),
            ("@daily", "2026-11-27T00:00:00Z"),
            ("@midnight", "2026-11-27T00:00:00Z"),
            ("@HOURLY", "2026-11-26T22:00:00Z"),
        ] {
            assert_eq!(
                fires(&schedule(alias, "UTC"), "2026-11-26T21:30:00Z", 1),
                [first],
                "{alias}"
            );
        }
    }

    #[test]
    fn last_weekday_and_nth() {
        // Last day of the month, the weekday nearest the 15th, the third Friday, the last Friday.
        assert_eq!(
            fires(&schedule("0 23 L * *", "UTC"), "2026-02-01T00:00:00Z", 2),
            ["2026-02-28T23:00:00Z", "2026-03-31T23:00:00Z"]
        );
        // 2026-08-15 is a Saturday: its nearest weekday is Friday the 14th.
        assert_eq!(
            fires(&schedule("0 0 15W * *", "UTC"), "2026-08-01T00:00:00Z", 1),
            ["2026-08-14T00:00:00Z"]
        );
        assert_eq!(
            fires(&schedule("0 0 * * 5#3", "UTC"), "2026-11-01T00:00:00Z", 1),
            ["2026-11-20T00:00:00Z"]
        );
        assert_eq!(
            fires(&schedule("0 0 * * 5L", "UTC"), "2026-11-01T00:00:00Z", 1),
            ["2026-11-27T00:00:00Z"]
        );
    }

    #[test]
    fn invalid_expressions_name_the_field() {
        for (expression, says) in [
            ("", "must not be empty"),
            ("   ", "must not be empty"),
            ("not a valid cron", "got 4"),
            ("0 0 0 0 0 0 0", "got 7"),
            ("99 25 32 13 8", "minute field \"99\""),
            ("0 25 * * *", "hour field \"25\""),
            ("0 0 32 * *", "day-of-month field \"32\""),
            ("0 0 1 13 *", "month field \"13\""),
            ("0 0 * * 8", "day-of-week field \"8\""),
            ("60 0 0 * * *", "second field \"60\""),
            ("*/0 * * * *", "minute field \"*/0\""),
            ("5-1-3 * * * *", "minute field"),
            ("0 0 * * MON+FRI", "contains '+'"),
            ("0 0 30 2 *", "never matches"),
            ("@fortnightly", "unknown alias"),
            ("@every", "needs a duration"),
            ("@every 500ms", "shorter than a second"),
            ("@every 1.5s", "whole number of seconds"),
            ("@every 5 minutes", "not a duration"),
            ("@every 100000h", "longer than ten years"),
        ] {
            let e = Schedule::parse(expression, Tz::UTC).expect_err(expression);
            assert!(e.contains(says), "{expression:?}: {e}");
        }
        // Valid only in some months: accepted (it fires in the months that have the day).
        assert!(Schedule::parse("0 0 31 * *", Tz::UTC).is_ok());
    }

    #[test]
    fn every_counts_from_registration_in_whole_seconds() {
        let s = schedule("@every 1h30m", "America/New_York");
        let first = s
            .first_after(at("2026-11-26T10:00:00.250Z"))
            .expect("first");
        assert_eq!(first.at, at("2026-11-26T11:30:01Z"));
        assert_eq!(
            s.following(&first).expect("next").at,
            at("2026-11-26T13:00:01Z")
        );
        assert_eq!(
            schedule("@every 90s", "UTC")
                .first_after(at("2026-01-01T00:00:00Z"))
                .expect("first")
                .at,
            at("2026-01-01T00:01:30Z")
        );
    }

    #[test]
    fn spring_forward_skips_the_missing_wall_clock_time() {
        // America/New_York, 2026-03-08: 02:00 EST becomes 03:00 EDT (07:00Z).
        let s = schedule("30 2 * * *", "America/New_York");
        let o = s.first_after(at("2026-03-07T08:00:00Z")).expect("next");
        assert!(!o.exists, "02:30 does not exist on the 8th");
        assert_eq!(
            o.at,
            at("2026-03-08T07:00:00Z"),
            "due when the clocks skip it"
        );
        assert_eq!(
            s.firing_from(&o).expect("fires").at,
            at("2026-03-09T06:30:00Z")
        );
        let due = s.due(&o, at("2026-03-08T07:00:01Z"));
        assert_eq!(due.fire, None);
        assert_eq!(due.skipped, Some((o, 1)));
        assert_eq!(due.next.expect("next").at, at("2026-03-09T06:30:00Z"));
        // Every 15 minutes: the four of the skipped hour are one skip of four.
        let s = schedule("*/15 * * * *", "America/New_York");
        let o = s.first_after(at("2026-03-08T06:50:00Z")).expect("next");
        assert_eq!(o.at, at("2026-03-08T07:00:00Z"));
        assert!(!o.exists);
        let due = s.due(&o, at("2026-03-08T07:00:00Z"));
        assert_eq!(due.skipped.map(|(_, n)| n), Some(4));
        // 03:00 EDT (07:00Z) exists and fires; it is due at the same instant.
        assert_eq!(due.fire.map(|f| f.at), Some(at("2026-03-08T07:00:00Z")));
    }

    #[test]
    fn fall_back_fires_each_wall_clock_time_once_at_its_first_instant() {
        // America/New_York, 2026-11-01: 02:00 EDT becomes 01:00 EST (06:00Z); 01:xx repeats.
        assert_eq!(
            fires(
                &schedule("30 1 * * *", "America/New_York"),
                "2026-11-01T04:00:00Z",
                2
            ),
            ["2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"]
        );
        assert_eq!(
            fires(
                &schedule("0,30 * * * *", "America/New_York"),
                "2026-11-01T04:50:00Z",
                4
            ),
            [
                "2026-11-01T05:00:00Z",
                "2026-11-01T05:30:00Z",
                // 01:00 and 01:30 EST have fired already, as EDT.
                "2026-11-01T07:00:00Z",
                "2026-11-01T07:30:00Z"
            ]
        );
        // Registered during the repeated hour's second pass: the next fire is after it.
        assert_eq!(
            fires(
                &schedule("*/15 * * * *", "America/New_York"),
                "2026-11-01T06:20:00Z",
                1
            ),
            ["2026-11-01T07:00:00Z"]
        );
    }

    #[test]
    fn other_zones_with_odd_changes() {
        // Lord Howe moves by 30 minutes (02:00 -> 02:30 on 2026-10-04).
        let s = schedule("15 2 * * *", "Australia/Lord_Howe");
        let o = s.first_after(at("2026-10-03T12:00:00Z")).expect("next");
        assert!(!o.exists, "{o:?}");
        // Santiago changes at midnight (2026-09-06 00:00 -> 01:00): a midnight entry skips it.
        let s = schedule("0 0 * * *", "America/Santiago");
        let o = s.first_after(at("2026-09-05T12:00:00Z")).expect("next");
        assert!(!o.exists, "{o:?}");
        assert_eq!(
            s.firing_from(&o).expect("fires").local.to_string(),
            "2026-09-07 00:00:00"
        );
        // Apia skipped 2011-12-30 entirely.
        let s = schedule("0 12 * * *", "Pacific/Apia");
        let days: Vec<String> = {
            let mut o = s.first_after(at("2011-12-29T00:00:00Z")).expect("next");
            let mut out = Vec::new();
            for _ in 0..3 {
                out.push(format!("{} {}", o.local.date(), o.exists));
                o = s.following(&o).expect("next");
            }
            out
        };
        assert_eq!(
            days,
            ["2011-12-29 true", "2011-12-30 false", "2011-12-31 true"]
        );
        // Dublin's winter time is the negative DST in the zone database: 01:30 occurs twice
        // on 2026-10-25 and fires once.
        assert_eq!(
            fires(
                &schedule("30 1 * * *", "Europe/Dublin"),
                "2026-10-24T12:00:00Z",
                2
            ),
            ["2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"]
        );
    }

    #[test]
    fn catch_up_fires_the_latest_due_occurrence_once() {
        let s = schedule("*/5 * * * *", "UTC");
        let from = s.first_after(at("2026-01-01T00:00:00Z")).expect("next");
        let due = s.due(&from, at("2026-01-01T00:31:00Z"));
        assert_eq!(due.fire.map(|f| f.at), Some(at("2026-01-01T00:30:00Z")));
        assert_eq!(due.missed, 5);
        assert_eq!(due.next.map(|n| n.at), Some(at("2026-01-01T00:35:00Z")));
        // Not yet due.
        let due = s.due(&from, at("2026-01-01T00:04:59Z"));
        assert_eq!((due.fire, due.next), (None, Some(from)));
        // A month down with an every-second entry: one run, found without walking them all.
        let s = schedule("* * * * * *", "Europe/Paris");
        let from = s.first_after(at("2026-01-01T00:00:00Z")).expect("next");
        let due = s.due(&from, at("2026-02-01T00:00:00.500Z"));
        assert_eq!(due.fire.map(|f| f.at), Some(at("2026-02-01T00:00:00Z")));
        assert!(due.missed >= CATCH_UP_STEPS, "{}", due.missed);
        assert_eq!(due.next.map(|n| n.at), Some(at("2026-02-01T00:00:01Z")));
        // @every, by arithmetic.
        let s = schedule("@every 10s", "UTC");
        let from = s.first_after(at("2026-01-01T00:00:00Z")).expect("next");
        let due = s.due(&from, at("2026-01-01T01:00:05Z"));
        assert_eq!(due.fire.map(|f| f.at), Some(at("2026-01-01T01:00:00Z")));
        assert_eq!(due.missed, 359);
        assert_eq!(due.next.map(|n| n.at), Some(at("2026-01-01T01:00:10Z")));
    }
}
