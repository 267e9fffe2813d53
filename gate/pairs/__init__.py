"""The pair life cycle: opened by the gateway's pair span, completed here, then evaluated."""
