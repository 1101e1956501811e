//! Enums written on the wire as one of a fixed set of names, declared once: [`names!`] gives
//! a fieldless enum its names, parsing, `Display`, `Serialize` and OpenAPI schema from one
//! list, so the document cannot name a value the server does not write, or miss one.

/// Implements, for a fieldless enum and its list of `Variant => "name"` pairs:
/// `as_str`, `from_name`, `ALL` (every value, in the list's order), `Display`, `Serialize`,
/// and `utoipa::ToSchema` (a string, one of the names, named after the type).
///
/// Every variant must be listed: `as_str` is an exhaustive `match`.
macro_rules! names {
    ($ty:ident { $($variant:ident => $name:literal),+ $(,)? }) => {
        // A private enum need not use every item.
        #[allow(dead_code)]
        impl $ty {
            /// Every value, in the order of its names.
            pub const ALL: &'static [$ty] = &[$($ty::$variant),+];

            /// The name as stored and sent.
            pub fn as_str(self) -> &'static str {
                match self { $($ty::$variant => $name),+ }
            }

            /// The value named `name`, if any.
            pub fn from_name(name: &str) -> Option<$ty> {
                match name {
                    $($name => Some($ty::$variant),)+
                    _ => None,
                }
            }
        }

        impl std::fmt::Display for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl serde::Serialize for $ty {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl utoipa::PartialSchema for $ty {
            fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
                utoipa::openapi::schema::ObjectBuilder::new()
                    .schema_type(utoipa::openapi::schema::Type::String)
                    .enum_values(Some([$($name),+]))
                    .into()
            }
        }

        impl utoipa::ToSchema for $ty {}
    };
}

pub(crate) use names;

#[cfg(test)]
mod tests {
    use utoipa::PartialSchema;

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Colour {
        Red,
        LightBlue,
    }

    names!(Colour {
        Red => "red",
        LightBlue => "light-blue",
    });

    #[test]
    fn one_list_gives_names_parsing_serialization_and_schema() {
        assert_eq!(Colour::ALL, &[Colour::Red, Colour::LightBlue]);
        assert_eq!(Colour::LightBlue.to_string(), "light-blue");
        assert_eq!(Colour::from_name("red"), Some(Colour::Red));
        assert_eq!(Colour::from_name("Red"), None);
        assert_eq!(serde_json::to_string(&Colour::Red).unwrap(), r#""red""#);
        let schema = serde_json::to_value(Colour::schema()).unwrap();
        assert_eq!(schema["type"], "string");
        assert_eq!(schema["enum"], serde_json::json!(["red", "light-blue"]));
        assert_eq!(<Colour as utoipa::ToSchema>::name(), "Colour");
    }
}
