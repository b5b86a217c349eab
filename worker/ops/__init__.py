"""Operations: stats, health, retention, privacy, maintenance and operator actions."""
