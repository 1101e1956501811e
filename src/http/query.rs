//! Query-string parameters and pagination ([OJS pagination]), with OJS errors.
//!
//! [OJS pagination]: https://github.com/openjobspec/spec/blob/main/spec/ojs-http-binding.md#17-pagination

use axum::extract::{FromRequestParts, RawQuery};
use axum::http::request::Parts;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chrono::{DateTime, Utc};
use serde::Serialize;

use super::error::ApiError;
use crate::wire::timestamp;

/// The decoded query string (`name=value` pairs; the last of repeated names wins).
#[derive(Debug, Clone, Default)]
pub struct QueryParams(Vec<(String, String)>);

impl<S: Send + Sync> FromRequestParts<S> for QueryParams {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let RawQuery(raw) = RawQuery::from_request_parts(parts, state)
            .await
            .unwrap_or(RawQuery(None));
        let params: Vec<(String, String)> = raw
            .map(|q| {
                form_urlencoded::parse(q.as_bytes())
                    .map(|(k, v)| (k.into_owned(), v.into_owned()))
                    .collect()
            })
            .unwrap_or_default();
        if let Some((name, _)) = params
            .iter()
            .find(|(k, v)| k.contains('\0') || v.contains('\0'))
        {
            return Err(bad(
                name,
                "query parameters must not contain the character U+0000".to_owned(),
            ));
        }
        Ok(QueryParams(params))
    }
}

fn bad(name: &str, message: String) -> ApiError {
    ApiError::invalid_field(&format!("query.{name}"), message)
}

impl QueryParams {
    /// A parameter's value; an empty value counts as absent.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
            .filter(|v| !v.is_empty())
    }

    /// A non-negative integer parameter.
    pub fn count(&self, name: &str) -> Result<Option<i64>, ApiError> {
        match self.get(name) {
            None => Ok(None),
            Some(v) => match v.parse::<i64>() {
                Ok(n) if n >= 0 => Ok(Some(n)),
                _ => Err(bad(
                    name,
                    format!("'{name}' must be a non-negative integer, got {v:?}"),
                )),
            },
        }
    }

    /// A comma-separated list (`None` when absent).
    pub fn list(&self, name: &str) -> Option<Vec<String>> {
        self.get(name).map(|v| {
            v.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect()
        })
    }

    /// An RFC 3339 timestamp parameter.
    pub fn timestamp(&self, name: &str) -> Result<Option<DateTime<Utc>>, ApiError> {
        match self.get(name) {
            None => Ok(None),
            Some(v) => timestamp::parse_client(v)
                .ok()
                .and_then(|t| t.absolute())
                .map(Some)
                .ok_or_else(|| {
                    bad(
                        name,
                        format!("'{name}' must be an RFC 3339 timestamp with a zone, got {v:?}"),
                    )
                }),
        }
    }
}

/// Default and largest page sizes of a list endpoint.
#[derive(Debug, Clone, Copy)]
pub struct PageSizes {
    pub default: i64,
    pub max: i64,
}

/// Data-plane lists: 50 by default, at most 200.
pub const DATA_PLANE: PageSizes = PageSizes {
    default: 50,
    max: 200,
};
/// Admin lists: 20 by default, at most 100.
pub const ADMIN: PageSizes = PageSizes {
    default: 20,
    max: 100,
};

/// One page of a list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Page {
    pub limit: i64,
    pub offset: i64,
}

#[derive(serde::Deserialize, Serialize)]
struct Cursor {
    o: i64,
}

impl Page {
    /// The page asked for: `cursor` wins over `page`/`per_page`, which win over
    /// `offset`/`limit`. Oversized limits are clamped.
    pub fn from_query(q: &QueryParams, sizes: PageSizes) -> Result<Page, ApiError> {
        let per_page = q.count("per_page")?;
        let limit = per_page
            .or(q.count("limit")?)
            .unwrap_or(sizes.default)
            .clamp(1, sizes.max);
        let offset = if let Some(cursor) = q.get("cursor") {
            URL_SAFE_NO_PAD
                .decode(cursor)
                .ok()
                .and_then(|bytes| serde_json::from_slice::<Cursor>(&bytes).ok())
                .filter(|c| c.o >= 0)
                .ok_or_else(|| {
                    bad(
                        "cursor",
                        "'cursor' is not a cursor this server issued".to_owned(),
                    )
                })?
                .o
        } else if let Some(page) = q.count("page")? {
            if page == 0 {
                return Err(bad("page", "'page' starts at 1".to_owned()));
            }
            (page - 1).saturating_mul(limit)
        } else {
            q.count("offset")?.unwrap_or(0)
        };
        Ok(Page { limit, offset })
    }

    /// The `pagination` object of a response listing this page of `total` items.
    pub fn describe(self, total: i64) -> Pagination {
        self.describe_counted(total, false, self.offset.saturating_add(self.limit) < total)
    }

    /// [`describe`](Self::describe) for a listing that read past the page to learn whether more
    /// follow (`has_more`), and whose `total` may be an estimate (`estimated`).
    pub fn describe_counted(self, total: i64, estimated: bool, has_more: bool) -> Pagination {
        Pagination {
            total,
            total_estimated: estimated,
            limit: self.limit,
            offset: self.offset,
            page: self.offset / self.limit + 1,
            per_page: self.limit,
            has_more,
            next_cursor: has_more.then(|| {
                URL_SAFE_NO_PAD.encode(
                    serde_json::to_vec(&Cursor {
                        o: self.offset + self.limit,
                    })
                    .unwrap_or_default(),
                )
            }),
        }
    }
}

/// The page parameters [`Page::from_query`] reads, documented on the type they make: `cursor`
/// wins over `page`/`per_page`, which win over `offset`/`limit`. An empty value counts as absent.
impl utoipa::IntoParams for Page {
    fn into_params(
        _: impl Fn() -> Option<utoipa::openapi::path::ParameterIn>,
    ) -> Vec<utoipa::openapi::path::Parameter> {
        use utoipa::openapi::KnownFormat::Int64;
        use utoipa::openapi::path::{ParameterBuilder, ParameterIn};
        use utoipa::openapi::schema::{ObjectBuilder, SchemaFormat, Type};
        let param = |name: &str, description: &str, schema: ObjectBuilder| {
            ParameterBuilder::new()
                .name(name)
                .parameter_in(ParameterIn::Query)
                .required(utoipa::openapi::Required::False)
                .description(Some(description))
                .schema(Some(schema))
                .build()
        };
        let count = |minimum: i64| {
            ObjectBuilder::new()
                .schema_type(Type::Integer)
                .format(Some(SchemaFormat::KnownFormat(Int64)))
                .minimum(Some(minimum))
        };
        vec![
            param(
                "limit",
                "Items per page: by default 50 (at most 200) on `/ojs/v1` lists, 20 (at most 100) \
                 on `/ojs/v1/admin` lists; larger values are lowered to the maximum, 0 is raised \
                 to 1.",
                count(0),
            ),
            param(
                "per_page",
                "The same as `limit`, which it overrides.",
                count(0),
            ),
            param("offset", "Items to skip (default 0).", count(0)),
            param(
                "page",
                "The page, from 1, of `per_page` items; overrides `offset`.",
                count(1),
            ),
            param(
                "cursor",
                "The `pagination.next_cursor` of an earlier answer; overrides `page` and `offset`.",
                ObjectBuilder::new().schema_type(Type::String),
            ),
        ]
    }
}

/// `pagination` of every list response.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Pagination {
    pub total: i64,
    /// `total` is the planner's estimate (a listing counts exactly up to 10,000 matches);
    /// absent when exact.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub total_estimated: bool,
    pub limit: i64,
    pub offset: i64,
    pub page: i64,
    pub per_page: i64,
    pub has_more: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(q: &str) -> QueryParams {
        QueryParams(
            form_urlencoded::parse(q.as_bytes())
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect(),
        )
    }

    #[test]
    fn pages_and_cursors() {
        assert_eq!(
            Page::from_query(&query(""), ADMIN).unwrap(),
            Page {
                limit: 20,
                offset: 0
            }
        );
        assert_eq!(
            Page::from_query(&query("limit=500&offset=7"), DATA_PLANE).unwrap(),
            Page {
                limit: 200,
                offset: 7
            }
        );
        let page2 = Page::from_query(&query("page=2&per_page=20&offset=99"), ADMIN).unwrap();
        assert_eq!(
            page2,
            Page {
                limit: 20,
                offset: 20
            }
        );
        let p = page2.describe(45);
        assert!(p.has_more);
        assert_eq!(p.page, 2);
        let next = Page::from_query(
            &query(&format!("cursor={}&limit=20", p.next_cursor.unwrap())),
            ADMIN,
        )
        .unwrap();
        assert_eq!(next.offset, 40);
        assert!(next.describe(45).next_cursor.is_none());
        for bad in ["limit=-1", "offset=x", "page=0", "cursor=zzz", "limit=1.5"] {
            assert!(Page::from_query(&query(bad), ADMIN).is_err(), "{bad}");
        }
    }
}
