-- Routing (docs/api-operations.md §12): why a generation's routes were chosen and ordered, written once at begin.
-- depends: 0002_leases
ALTER TABLE generations ADD COLUMN route_reason TEXT;
