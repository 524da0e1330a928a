"""The RSVP pipeline: Meetup-style RSVP events (the platform's reference workload)."""
