"""Reporting: tables, file formats, study reports, the verdict's rendering, the HTML page, pictures, export."""
